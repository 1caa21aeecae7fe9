"""The capacity model's arithmetic (tests/bench/capacity.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.bench.capacity import HEADROOM, UTILISATION, plan

CPU = {"gateway": 7.9, "review_state": 9.9, "nudge": 3.9, "rules": 0.2, "postgres": 4.8}
HELD = {"review_state": 6.0, "nudge": 2.0, "rules": 0.1, "gateway": 1.0}


def test_a_replica_is_planned_at_its_utilisation_of_one_core() -> None:
    at = plan(100, CPU, HELD)
    # review_state: 100/s x 9.9 ms = 0.99 of a core; at 0.6 a replica, 2 replicas.
    assert at.replicas["review_state"] == 2 and at.replicas["rules"] == 1
    assert at.connections["review_state"] == 2  # 100/s x 6 ms = 0.6 busy, twice that: 2 (and >= replicas)
    assert at.postgres_cores == pytest.approx(100 * 4.8 / 1000 / 0.7, abs=0.01)


@given(
    st.floats(min_value=1, max_value=20_000),
    st.dictionaries(st.sampled_from(["gateway", "review_state", "nudge"]), st.floats(0.01, 50), min_size=1),
)
def test_the_plan_covers_the_load_and_grows_with_it(rate: float, cpu: dict[str, float]) -> None:
    held = {name: ms / 2 for name, ms in cpu.items()}
    here, more = plan(rate, cpu, held), plan(rate * 2, cpu, held)
    for name, ms in cpu.items():
        assert here.replicas[name] * UTILISATION * 1000 >= rate * ms - 1e-6  # enough cores
        assert here.connections[name] >= rate * held[name] / 1000 * HEADROOM - 1
        assert here.pool_per_replica[name] * here.replicas[name] >= here.connections[name]
        assert more.replicas[name] >= here.replicas[name] and more.connections[name] >= here.connections[name]


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError):
        plan(0, CPU, HELD)
