"""Under ``reviewloop up`` every gRPC service serves ``/metrics``, ``/livez`` and ``/readyz`` on an HTTP ops
port of its own, unset or not, so the outbox, nudge and delivery gauges can be read on one machine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from reviewloop.config import address_variable, metrics_variable
from stack import topology
from stack.launcher import LaunchError, Stack, free_port
from stack.topology import ALL, GATEWAY, SERVICES, with_defaults

# What each service's scrape must show on a fresh store (a gauge with no row to count shows no sample).
GAUGES = {
    "review_state": ("reviewloop_delivery_parked", "db_client_connections_usage"),
    "nudge": ("db_client_connections_usage",),
    "rules": ("db_client_connections_usage",),
    "diff": ("db_client_connections_usage",),
    "dispatch_budget": ("reviewloop_budget_launch_refusals", "db_client_connections_usage"),
}


def test_every_service_gets_an_ops_port_of_its_own_by_default() -> None:
    filled = with_defaults({})
    ops = [filled[metrics_variable(name)] for name in SERVICES]
    grpc = [filled[address_variable(name)] for name in ALL]
    assert len(set(ops)) == len(SERVICES) and not set(ops) & set(grpc)
    placed = with_defaults({metrics_variable("nudge"): "0.0.0.0:9464"})
    assert placed[metrics_variable("nudge")] == "0.0.0.0:9464"  # a set address is kept
    assert Stack(filled).ops_address(GATEWAY) == filled[address_variable(GATEWAY)]


@pytest.fixture
def services_without_ops_addresses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Stack]:
    """The gRPC services as ``reviewloop up`` starts them, on free ports, no ops address set by hand."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_METRICS_ADDR") and not k.endswith("_DB")}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    for name in ALL:
        env[address_variable(name)] = f"127.0.0.1:{free_port()}"
    env["REVIEWLOOP_DATA_DIR"] = str(tmp_path)
    for name in SERVICES:  # the defaults' ports, moved to free ones so parallel runs never collide
        monkeypatch.setitem(topology.DEFAULT_OPS_PORTS, name, free_port())
    stack = Stack(env)
    yield stack
    stack.stop_all()


async def test_every_service_serves_metrics_livez_and_readyz_under_up(
    services_without_ops_addresses: Stack,
) -> None:
    stack = services_without_ops_addresses
    stack.check_ports(SERVICES)
    for name in SERVICES:
        stack.start(name)
    try:
        await stack.wait_serving(SERVICES)
    except LaunchError as exc:
        pytest.fail(str(exc))
    async with httpx.AsyncClient(timeout=10) as http:
        for name in SERVICES:
            base = f"http://{stack.ops_address(name)}"
            assert stack.ops_address(name) == f"127.0.0.1:{topology.DEFAULT_OPS_PORTS[name]}"
            assert (await http.get(f"{base}/livez")).status_code == 200, name
            assert (await http.get(f"{base}/readyz")).status_code == 200, name
            scraped = await http.get(f"{base}/metrics")
            assert scraped.status_code == 200, name
            assert scraped.headers["content-type"].startswith("text/plain"), name
            for gauge in GAUGES[name]:
                assert gauge in scraped.text, (name, gauge, scraped.text[:2000])
