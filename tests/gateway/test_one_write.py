"""The gateway's connections send a response's head and body together, and still stream what streams.

uvicorn serves a small ASGI app on the gateway's protocol (``gateway.__main__.HttpProtocol``) in a process
of its own, on loopback; a socket client reads what arrives, as soon as it arrives.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from stack.launcher import free_port

SERVER = """
import sys, uvicorn
from gateway.__main__ import HttpProtocol

BODY = sys.argv[2].encode()

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"application/json")]
    if scope["path"] == "/stream":  # its second chunk once the client has sent the rest of its body
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.body", "body": b"second"})
        return
    headers.append((b"content-length", str(len(BODY)).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), http=HttpProtocol, log_level="warning")
"""
BODY = b'{"review_id":"rr_1","state":"needs_review"}'


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    chosen = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(chosen), BODY.decode()], env=env)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", chosen), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the server never listened"
                time.sleep(0.05)
        yield chosen
    finally:
        server.terminate()
        server.wait(10)


def _connect(port: int) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client


def _data_segments_in(client: socket.socket) -> int:
    """The TCP segments with data the connection has received (Linux's ``tcp_info.tcpi_data_segs_in``)."""
    info = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return int(struct.unpack_from("I", info, 152)[0])


def test_a_response_arrives_in_one_segment(port: int) -> None:
    requests = 50
    with _connect(port) as client:
        before = _data_segments_in(client)
        for _ in range(requests):  # a kept-alive connection, request after request
            client.sendall(b"GET /review HTTP/1.1\r\nhost: gateway\r\n\r\n")
            answer = b""
            while not answer.endswith(BODY):
                answer += client.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        # Head and body went out in one send: one segment each (two with uvicorn's own transport).
        assert _data_segments_in(client) - before == requests


def test_a_streamed_response_still_sends_each_chunk_as_it_is_written(port: int) -> None:
    with _connect(port) as client:
        client.sendall(
            b"POST /stream HTTP/1.1\r\nhost: gateway\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n"
        )
        seen = b""
        while b"first" not in seen:  # arrives while the app still waits for the rest of the request
            seen += client.recv(65536)
        client.sendall(b"0\r\n\r\n")
        while not seen.endswith(b"0\r\n\r\n"):
            seen += client.recv(65536)
        assert b"second" in seen


def test_a_response_on_a_closing_connection_goes_out_before_the_close(port: int) -> None:
    with _connect(port) as client:
        client.sendall(b"GET /review HTTP/1.1\r\nhost: gateway\r\nconnection: close\r\n\r\n")
        answer = b""
        while chunk := client.recv(65536):  # to the server's close
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(BODY)
