"""The ``reviewloop`` command's own surface: ``--version``, help in plain text, and what a gRPC client
learns by reflection."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from grpc_reflection.v1alpha import reflection_pb2
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


@pytest.mark.parametrize("package", ["v1", "v1alpha"])
async def test_reflection_lists_and_describes_the_services(diff_service: Stack, package: str) -> None:
    """Newer clients (grpcurl, Postman) ask reflection ``v1`` first, older ones ``v1alpha``: both list
    the services and describe them (grpcio-reflection ships v1alpha only; reviewloop.reflection serves v1
    with the same servicer)."""
    diff_service.start("diff")
    await diff_service.wait_serving(["diff"])
    method = f"/grpc.reflection.{package}.ServerReflection/ServerReflectionInfo"
    async with grpc.aio.insecure_channel(diff_service.address("diff")) as channel:
        call = channel.stream_stream(
            method,
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="reviewloop.diff.v1.DiffService"),
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol=f"grpc.reflection.{package}.ServerReflection"
            ),
        ]
        answers = [answer async for answer in call(iter(requests))]
    names = {service.name for service in answers[0].list_services_response.service}
    assert {"reviewloop.diff.v1.DiffService", "grpc.health.v1.Health"} <= names
    assert {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} <= names
    for answer in answers[1:]:
        files = [
            FileDescriptorProto.FromString(raw)
            for raw in answer.file_descriptor_response.file_descriptor_proto
        ]
        assert files, answer.error_response
        assert any(
            service.name == "ServerReflection" or service.name == "DiffService"
            for f in files
            for service in f.service
        )
