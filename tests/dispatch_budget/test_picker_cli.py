"""``reviewloop run sequence``: the shared picker (spec 003) on the command line, through the real
gateway on both backends. It reads the run and the runner catalog, applies row operations in order,
shows each row (effort beside model, WARM/COLD, the default a runner without adjustable effort runs
at, each row's problems), refuses to save a bad sequence, and saves a good one, which the REST API
reads back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import Api
from tests.e2e.test_bad_input import assert_problem

CODEX = {
    "name": "codex",
    "models": ["gpt-5", "gpt-5-mini"],
    "efforts": ["high", "low"],
    "default_model": "gpt-5",
    "default_effort": "high",
}
SOLO = {
    "name": "solo",
    "models": ["m1"],
    "efforts": ["medium"],
    "default_model": "m1",
    "default_effort": "medium",
    "supports_warm": False,
}


async def test_run_sequence_edits_a_runs_sequence_with_the_shared_picker(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from stack.cli import main

    project = await api.project()
    admin = api.auth((await api.key(project["project_id"], "admin"))["api_key"])
    agent = api.auth((await api.key(project["project_id"], "agent"))["api_key"])
    for runner in (CODEX, SOLO):
        assert (
            await api.http.post("/v1/review-rounds/runners", json=runner, headers=admin)
        ).status_code == 201
    created = await api.http.put(
        "/v1/review-rounds/runs/run_cli", json={"review_mode": "warm"}, headers=admin
    )
    assert created.status_code == 200, created.text
    assert_problem(await api.http.get("/v1/review-rounds/runs/run_nope", headers=agent), 404, "not_found")

    monkeypatch.setenv("REVIEWLOOP_API_KEY", admin["Authorization"].removeprefix("Bearer "))
    gateway = ["--gateway", f"http://{api.stack.address('gateway')}"]

    def run(*argv: str) -> Any:
        return asyncio.to_thread(main, ["run", "sequence", "run_cli", *argv, *gateway])

    assert await run() == 0
    assert "(no rows: the project review configuration decides)" in capsys.readouterr().out

    # A bad row is shown with its problem, and nothing is saved.
    assert await run("--add", "codex/gpt-5-mini/low:cold", "--add", "solo:warm", "--save") == 2
    out, err = capsys.readouterr()
    assert "1. codex  model gpt-5-mini  effort low  COLD  [also the pipeline review]" in out
    assert "2. solo  model runner default (m1)  effort runner default (medium)  WARM" in out
    assert "solo has no adjustable effort; it runs at medium (its default)." in out
    assert "error: mode: solo cannot continue a WARM session" in out
    assert "nothing was saved" in err
    assert (
        "review_sequence" not in (await api.http.get("/v1/review-rounds/runs/run_cli", headers=agent)).json()
    )

    # Fixed by a set, reordered, saved; an added row without a mode takes none (never implied).
    assert await run("--add", "codex", "--set", "1.runner=solo") == 2
    assert "error: mode: required: warm or cold" in capsys.readouterr().out
    argv = [
        "--add",
        "codex/gpt-5-mini/low:cold",
        "--add",
        "solo:warm",
        "--set",
        "2.mode=cold",
        "--move",
        "2:1",
    ]
    assert await run(*argv, "--save") == 0
    assert "saved: 2 row(s)" in capsys.readouterr().out
    saved = await api.http.get("/v1/review-rounds/runs/run_cli", headers=agent)
    assert saved.status_code == 200, saved.text
    assert saved.json()["review_sequence"] == [
        {"runner": "solo", "model": "m1", "effort": "medium", "mode": "cold"},
        {"runner": "codex", "model": "gpt-5-mini", "effort": "low", "mode": "cold"},
    ]

    # The stored sequence loads back into the picker; an added row starts in the run's mode (WARM).
    assert await run("--add", "codex:warm", "--remove", "1", "--save") == 0
    out = capsys.readouterr().out
    assert "1. codex  model gpt-5-mini  effort low  COLD  [also the pipeline review]" in out
    assert "2. codex  model runner default (gpt-5)  effort runner default (high)  WARM" in out
    assert await run("--remove", "9") == 2
    assert "there is no row 9" in capsys.readouterr().err
