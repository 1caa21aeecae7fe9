"""The launcher's port check: `reviewloop up` refuses a port something listens on, and only that."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from stack.launcher import free_port, port_free


def _time_wait_on(port: int) -> None:
    """Leave ``port`` holding only TIME_WAIT sockets, as a stopped server does for a minute."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its socket goes to TIME_WAIT
        client.close()


def test_a_port_with_only_time_wait_sockets_is_free() -> None:
    port = free_port()
    _time_wait_on(port)
    assert port_free(f"127.0.0.1:{port}")


@pytest.mark.parametrize("reuse", [False, True], ids=["plain-listener", "reuseaddr-listener"])
def test_a_port_something_listens_on_is_taken(reuse: bool) -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert not port_free(f"127.0.0.1:{listener.getsockname()[1]}")


def test_free_ports_are_distinct_and_never_ephemeral() -> None:
    """An outgoing connection can't take a test server's port between the probe and the bind."""
    low, high = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert not [p for p in ports if low <= p <= high]
