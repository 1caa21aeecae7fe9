"""``/metrics`` on its own address (issue 36): with ``REVIEWLOOP_GATEWAY_METRICS_ADDR`` set (the manifests
set it), the gauges are served there and the public port answers ``/metrics`` 404."""

from __future__ import annotations

from pathlib import Path

import httpx
from stack.launcher import free_port

from tests.conftest import Databases
from tests.gateway.inprocess import gateway


async def test_metrics_on_their_own_address_are_gone_from_the_public_port(
    databases: Databases, backend: str, tmp_path: Path
) -> None:
    apart = f"127.0.0.1:{free_port()}"
    url = await databases.url(backend, "gateway")
    async with gateway(url, tmp_path, metrics_listen=apart) as (_, public):
        hidden = await public.get("/metrics")
        assert hidden.status_code == 404, hidden.text
        assert hidden.headers["content-type"].startswith("application/problem+json")
        async with httpx.AsyncClient(base_url=f"http://{apart}") as scraper:
            scraped = await scraper.get("/metrics")
            assert scraped.status_code == 200
            assert "# TYPE" in scraped.text  # the Prometheus text (the in-process app sets up no OTel meter)
            assert (await scraper.get("/livez")).status_code == 200


async def test_without_the_setting_metrics_stay_on_the_public_port(
    databases: Databases, backend: str, tmp_path: Path
) -> None:
    async with gateway(await databases.url(backend, "gateway"), tmp_path) as (_, public):
        assert (await public.get("/metrics")).status_code == 200
