"""Schemathesis against the served /openapi.yaml of a live stack, with agent, human, review-agent and admin
keys: no 5xx; every response conforms to its documented status, content type, headers and schema; a request
the schema refuses is refused, and one it takes is taken (schemathesis.toml names the few operations whose
valid requests depend on another field or on the project's state); a 405 names every documented method.

Each operation runs under the first key (agent, human, review agent, admin, bootstrap) it does not refuse, so
the run spends its requests where they reach a route's body, with a few examples each (about two minutes).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack.launcher import Stack
from stack.topology import GATEWAY

from tests.conftest import ADMIN_TOKEN, PG_ENV, Api

ST = Path(sys.executable).parent / "st"
CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = int(os.environ.get("REVIEWLOOP_SCHEMATHESIS_EXAMPLES", "3"))
# Routes excluded by design, as exact paths.
EXCLUDED_PATHS: list[str] = [
    "/healthz",
    "/v1/review-events/wait",  # a long-poll: a generated timeout_s holds each request up to 60 s
    "/v1/review-events/stream",  # server-sent events: never ends
]
KINDS = ("agent", "human", "review_agent", "admin")


async def _owners(api: Api, document: dict[str, Any], keys: dict[str, str]) -> dict[str, list[str]]:
    """The operation ids each key runs: an operation goes to the first key it does not answer 401/403."""
    owners: dict[str, list[str]] = {name: [] for name in keys}
    for path, item in document["paths"].items():
        if path in EXCLUDED_PATHS:
            continue
        for method, operation in item.items():
            url = re.sub(r"\{[^}]+\}", "x", path)
            body = {"json": {}} if "requestBody" in operation else {}
            owner = next(reversed(keys))  # refused by every key: the last one's refusals are checked
            for name, key in keys.items():
                response = await api.http.request(method.upper(), url, headers=api.auth(key), **body)
                if response.status_code not in (401, 403):
                    owner = name
                    break
            owners[owner].append(operation["operationId"])
    return owners


async def _schemathesis(url: str, key: str, operations: list[str], cwd: Path) -> tuple[int, str]:
    command = [
        str(ST),
        "--config-file",
        str(CONFIG),
        "run",
        url,
        "--header",
        f"Authorization:Bearer {key}",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        "8",
        "--workers",
        "1",
        "--no-color",
        "--output-truncate",
        "true",
        *[arg for operation in operations for arg in ("--include-operation-id", operation)],
    ]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=cwd,
        env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false"},
    )
    output, _ = await process.communicate()
    return process.returncode or 0, output.decode()


@pytest.mark.skipif(not ST.exists(), reason="schemathesis is not installed (pip install -e .[dev])")
async def test_the_served_contract_holds_under_schemathesis(api: Api, stack: Stack, tmp_path: Path) -> None:
    if os.environ.get(PG_ENV) and stack.env["REVIEWLOOP_GATEWAY_DB"].startswith("sqlite"):
        pytest.skip("the PostgreSQL stack runs it (NUL and 64-bit limits bite there first)")
    project = await api.project()
    keys = {kind: (await api.key(project["project_id"], kind))["api_key"] for kind in KINDS}
    keys["bootstrap"] = ADMIN_TOKEN
    document = yaml.safe_load((await api.http.get("/openapi.yaml")).text)
    owners = await _owners(api, document, keys)
    url = f"http://{stack.address(GATEWAY)}/openapi.yaml"
    failed = []
    for name, operations in owners.items():
        if not operations:
            continue
        code, output = await _schemathesis(url, keys[name], operations, tmp_path)
        if code != 0:
            failed.append(f"--- {name} key ({len(operations)} operations)\n{output[-8000:]}")
    assert not failed, "\n".join(failed)
