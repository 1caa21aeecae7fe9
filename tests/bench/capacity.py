"""The capacity model of docs/performance.md ("Capacity model"): from what one lifecycle costs each
process (CPU) and each service's store (connection-held time), how many replicas and PostgreSQL
connections a lifecycle rate needs.

- A replica is one Python process: one event loop, so at most one core. It is planned at ``UTILISATION``
  of that core (0.6): above it the loop's queue, and so the p99, grows faster than the load.
- A service's PostgreSQL connections follow Little's law: rate x connection-held time per lifecycle is
  the mean number busy; twice that (``HEADROOM``) absorbs the bursts, and never fewer than one per replica.
- PostgreSQL's own CPU scales the same way, planned at ``PG_UTILISATION`` (0.7) of its cores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

UTILISATION = 0.6
PG_UTILISATION = 0.7
HEADROOM = 2.0


@dataclass(frozen=True)
class Plan:
    rate: float  # lifecycles/s
    replicas: dict[str, int]  # process -> replicas
    connections: dict[str, int]  # service -> PostgreSQL connections, all its replicas together
    pool_per_replica: dict[str, int]  # service -> REVIEWLOOP_DB_POOL_SIZE for each replica
    postgres_cores: float


def plan(rate: float, cpu_ms: Mapping[str, float], held_ms: Mapping[str, float]) -> Plan:
    """What ``rate`` lifecycles/s need, given each process's CPU ms per lifecycle (``postgres`` for the
    server) and each service's connection-held ms per lifecycle."""
    if rate <= 0:
        raise ValueError("a rate is a positive number of lifecycles per second")
    processes = {name: ms for name, ms in cpu_ms.items() if name != "postgres"}
    replicas = {name: max(1, math.ceil(rate * ms / 1000 / UTILISATION)) for name, ms in processes.items()}
    connections = {
        name: max(replicas.get(name, 1), math.ceil(rate * ms / 1000 * HEADROOM))
        for name, ms in held_ms.items()
    }
    pools = {name: math.ceil(count / replicas.get(name, 1)) for name, count in connections.items()}
    cores = rate * cpu_ms.get("postgres", 0.0) / 1000 / PG_UTILISATION
    return Plan(rate, replicas, connections, pools, round(cores, 2))
