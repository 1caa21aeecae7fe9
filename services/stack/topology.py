"""The parts of one reviewloop deployment and the loopback addresses they take when none is set.

Each process reads its own and its peers' addresses from ``REVIEWLOOP_<PART>_ADDR``, and a gRPC service
the address of its HTTP ops port (``/metrics``, ``/livez``, ``/readyz``) from
``REVIEWLOOP_<SERVICE>_METRICS_ADDR``; ``with_defaults`` fills the ones left unset, so ``reviewloop up`` and
``reviewloop serve`` run on one machine as they are, every gauge readable (the gateway serves its own on
its HTTP port).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from reviewloop.config import DataSettings, address_variable, metrics_variable

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
# Each gRPC service's HTTP ops port: its default gRPC port + 10 (on TCP even when its gRPC is a socket).
DEFAULT_OPS_PORTS: dict[str, int] = {name: DEFAULT_PORTS[name] + 10 for name in SERVICES}


def with_defaults(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``env`` plus the loopback address of every part and ops port it does not place."""
    filled = dict(env)
    for variable, port in (
        *((address_variable(name), port) for name, port in DEFAULT_PORTS.items()),
        *((metrics_variable(name), port) for name, port in DEFAULT_OPS_PORTS.items()),
    ):
        if not filled.get(variable):
            filled[variable] = f"127.0.0.1:{port}"
    return filled


# AF_UNIX paths hold 108 bytes with the terminating NUL on Linux (104 on macOS).
_UNIX_PATH_MAX = 100


def socket_dir(env: Mapping[str, str] = os.environ) -> Path:
    """A directory only this user can enter, for the services' Unix sockets: ``<data dir>/sockets``.

    A data directory too deep for a socket's path (``_UNIX_PATH_MAX``) gets a fresh private directory
    under the temp dir instead.
    """
    where = DataSettings.from_env(env).data_dir.resolve() / "sockets"
    if len(str(where / "dispatch_budget.sock")) > _UNIX_PATH_MAX:
        private = Path(tempfile.mkdtemp(prefix="reviewloop-"))  # mode 0700
        # Removed when the process that made it (``reviewloop up``) exits, after its parts stopped.
        atexit.register(shutil.rmtree, private, True)
        return private
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    where.chmod(0o700)
    return where


def colocated(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``env`` with every service it does not place on a ``unix:`` socket under ``socket_dir``.

    For parts one launcher starts on one machine (``reviewloop up``): a Unix socket spares each call
    the loopback TCP stack, and only this user reaches it (the directory is 0700). The gateway stays
    on TCP (it serves HTTP); an address set in ``env`` is kept as it is.
    """
    filled = dict(env)
    unset = [name for name in SERVICES if not filled.get(address_variable(name))]
    if unset:
        where = socket_dir(env)
        for name in unset:
            filled[address_variable(name)] = f"unix:{where / name}.sock"
    return with_defaults(filled)


def is_unix(addr: str) -> bool:
    """Whether ``addr`` is a Unix domain socket (``unix:/path``)."""
    return addr.startswith("unix:")
