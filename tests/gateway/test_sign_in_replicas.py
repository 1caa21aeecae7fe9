"""The console's sign-in limit is counted in the gateway's store (issue 38): a second gateway replica on
the same store refuses a key prefix the first one has used up, where each replica kept its own window."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Databases
from tests.gateway.inprocess import gateway


async def test_a_second_replica_refuses_the_key_prefix_the_first_used_up(
    databases: Databases, backend: str, tmp_path: Path
) -> None:
    url = await databases.url(backend, "gateway")
    prefix = "rlk_Rp1Ca2Xy"
    async with gateway(url, tmp_path / "a") as (_, first), gateway(url, tmp_path / "b") as (_, second):
        for n in range(10):  # a key prefix's allowance, each refused as an unknown key
            tried = await first.post("/console/sign-in", data={"key": f"{prefix}-guess-{n}"})
            assert tried.status_code == 401, (n, tried.status_code)
        refused = await second.post("/console/sign-in", data={"key": f"{prefix}-guess-10"})
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert "Too many sign-in attempts from this key" in refused.text
        assert "set-cookie" not in refused.headers
