"""The ``reviewloop`` command's own surface: ``--version``, help in plain text, and what a gRPC client
learns by reflection."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from reviewloop.config import address_variable
from reviewloop.contract import CONTRACT_VERSION
from stack.cli import all_parsers, build_parser, plain
from stack.launcher import Stack, free_port
from stack.topology import ALL

RST_MARKUP = ("``", ":func:`", ":class:`", ":meth:`", ":mod:`", "`_")


def test_version_names_the_package_and_the_contract() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stack", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("reviewloop ") and f"contract {CONTRACT_VERSION}" in done.stdout


def test_no_command_or_subcommand_help_shows_restructuredtext_markup() -> None:
    parsers = all_parsers(build_parser())
    assert len(parsers) > 10  # every subcommand, nested ones (outbox dead-letters, review request) too
    for parser in parsers:
        text = parser.format_help()
        assert not [mark for mark in RST_MARKUP if mark in text], (parser.prog, text)
    assert "The reviewloop command" in parsers[0].format_help()


def test_plain_reads_inline_markup_as_its_words() -> None:
    assert plain("The ``reviewloop`` command") == "The reviewloop command"
    assert plain("see :func:`reviewloop.service.start` and `the spec`_") == (
        "see reviewloop.service.start and the spec"
    )
    assert plain("a `single` tick stays") == "a `single` tick stays"


@pytest.fixture
def diff_service(tmp_path: Path) -> Iterator[Stack]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWLOOP_")}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    for name in ALL:
        env[address_variable(name)] = f"127.0.0.1:{free_port()}"
    env["REVIEWLOOP_DIFF_METRICS_ADDR"] = f"127.0.0.1:{free_port()}"
    env["REVIEWLOOP_DATA_DIR"] = str(tmp_path)
    stack = Stack(env)
    yield stack
    stack.stop_all()


async def test_reflection_v1alpha_lists_the_services(diff_service: Stack) -> None:
    """grpcio-reflection ships only ``grpc.reflection.v1alpha`` (grpc/grpc#38576 asks for v1), so a
    service serves v1alpha alone; the last assertion fails once the package offers v1, to serve it too."""
    diff_service.start("diff")
    await diff_service.wait_serving(["diff"])
    async with grpc.aio.insecure_channel(diff_service.address("diff")) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        answers = [answer async for answer in stub.ServerReflectionInfo(iter([request]))]
    names = {service.name for service in answers[0].list_services_response.service}
    assert {"reviewloop.diff.v1.DiffService", "grpc.health.v1.Health"} <= names
    assert "grpc.reflection.v1alpha.ServerReflection" in names
    assert importlib.util.find_spec("grpc_reflection.v1") is None, (
        "grpcio-reflection now ships v1: serve it beside v1alpha in reviewloop.service (issue 37)"
    )
