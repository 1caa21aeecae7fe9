"""The parts of one reviewloop deployment and the loopback addresses they take when none is set.

Each process reads its own and its peers' addresses from ``REVIEWLOOP_<PART>_ADDR``; ``with_defaults``
fills the ones left unset, so ``reviewloop up`` and ``reviewloop serve`` run on one machine as they are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from reviewloop.config import address_variable

SERVICES = ("review_state", "rules", "diff", "nudge", "dispatch_budget")
GATEWAY = "gateway"
ALL = (*SERVICES, GATEWAY)

DEFAULT_PORTS: Mapping[str, int] = {
    "review_state": 50151,
    "rules": 50152,
    "diff": 50153,
    "nudge": 50154,
    "dispatch_budget": 50155,
    GATEWAY: 8080,
}


def with_defaults(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``env`` plus the loopback address of every part it does not place."""
    filled = dict(env)
    for name, port in DEFAULT_PORTS.items():
        if not filled.get(address_variable(name)):
            filled[address_variable(name)] = f"127.0.0.1:{port}"
    return filled


def address(name: str, env: Mapping[str, str] = os.environ) -> str:
    """Where part ``name`` listens, the default included."""
    return with_defaults(env)[address_variable(name)]
