"""Where ``reviewloop up`` places the services it starts: Unix sockets in a directory only its user enters."""

from __future__ import annotations

import stat
from pathlib import Path

from stack.launcher import port_free
from stack.topology import SERVICES, colocated, socket_dir


def test_unset_services_go_on_unix_sockets_and_a_set_address_is_kept(tmp_path: Path) -> None:
    env = {"REVIEWLOOP_DATA_DIR": str(tmp_path), "REVIEWLOOP_RULES_ADDR": "127.0.0.1:19999"}
    placed = colocated(env)
    assert placed["REVIEWLOOP_RULES_ADDR"] == "127.0.0.1:19999"
    for name in SERVICES:
        if name != "rules":
            assert (
                placed[f"REVIEWLOOP_{name.upper()}_ADDR"] == f"unix:{tmp_path.resolve()}/sockets/{name}.sock"
            )
    assert placed["REVIEWLOOP_GATEWAY_ADDR"].startswith("127.0.0.1:")  # HTTP stays on TCP
    assert stat.S_IMODE((tmp_path / "sockets").stat().st_mode) == 0o700


def test_a_data_dir_too_deep_for_a_socket_path_gets_a_private_temp_dir(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    where = socket_dir({"REVIEWLOOP_DATA_DIR": str(deep)})
    assert len(str(where / "dispatch_budget.sock")) < 100
    assert stat.S_IMODE(where.stat().st_mode) == 0o700


def test_a_stale_socket_file_is_free_and_a_live_one_is_taken(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(path))
        live.listen()
        assert not port_free(f"unix:{path}")
    assert path.exists() and port_free(f"unix:{path}")  # the file of a stopped server
