"""The OpenAPI document is valid, and a client generated from it (openapi-python-client) works as is."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from openapi_spec_validator import validate
from stack.launcher import Stack

from tests.conftest import Api, draft
from tests.e2e.helpers import events_until


async def test_the_openapi_document_passes_openapi_spec_validator(api: Api) -> None:
    document = yaml.safe_load((await api.http.get("/openapi.yaml")).text)
    validate(document)  # raises on the first violation (it refused the ten `Idempotency-Key: ''` defaults)


@pytest.fixture(scope="session")
def generated_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The client openapi-python-client generates, offline, from the gateway's document."""
    generator = shutil.which("openapi-python-client", path=str(Path(sys.executable).parent))
    if generator is None:
        pytest.skip("openapi-python-client is not installed")
    from gateway.asgi import create_app
    from gateway.settings import GatewaySettings

    root = tmp_path_factory.mktemp("generated")
    env = {f"REVIEWLOOP_{n.upper()}_ADDR": "127.0.0.1:1" for n in ("gateway", *GATEWAY_PEERS)}
    document = create_app(
        GatewaySettings.from_env({**env, "REVIEWLOOP_ADMIN_TOKEN": "x", "REVIEWLOOP_DATA_DIR": str(root)})
    ).openapi()
    (root / "openapi.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    subprocess.run(
        [generator, "generate", "--path", "openapi.yaml", "--output-path", "rlclient", "--meta", "none"],
        cwd=root,
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(root))
    return importlib.import_module("rlclient")


GATEWAY_PEERS = ("review_state", "rules", "diff", "nudge", "dispatch_budget")


async def test_a_generated_client_sends_reads_and_acks(api: Api, stack: Stack, generated_client: Any) -> None:
    agent = await api.agent()
    token = agent["Authorization"].removeprefix("Bearer ")
    send = importlib.import_module("rlclient.api.reviews.send_email")
    get = importlib.import_module("rlclient.api.reviews.get_review")
    cancel = importlib.import_module("rlclient.api.reviews.cancel_review")
    ack = importlib.import_module("rlclient.api.review_events.ack_review_events")
    models = importlib.import_module("rlclient.models")
    client = generated_client.AuthenticatedClient(base_url=str(api.http.base_url), token=token)

    body = draft()
    body["text"] = body.pop("body_text")  # the published (SDK) name; the spec's still works over plain JSON
    sent = await send.asyncio_detailed(client=client, body=models.SendIn.from_dict(body))
    assert sent.status_code == 202, sent.content  # a 422 before: the generated default Idempotency-Key ''
    review_id = sent.parsed.review_id
    read = await get.asyncio_detailed(review_id, client=client)
    assert read.status_code == 200 and read.parsed.id == review_id
    cancelled = await cancel.asyncio_detailed(
        review_id, client=client, body=models.CancelIn.from_dict({"parent_revision": 1})
    )
    assert cancelled.status_code == 200, cancelled.content
    events = await events_until(api, agent, 1)
    seq = max(e["seq"] for e in events if e.get("review_id") == review_id)
    acked = await ack.asyncio_detailed(
        client=client,
        body=models.AckReviewEventRequest.from_dict({"acks": [{"review_id": review_id, "through_seq": seq}]}),
    )
    assert acked.status_code == 200, acked.content
    assert acked.parsed.acked >= 1
