"""Conformance and drift (spec 000, "How the contract stays honest"): every canonical example validates
against the OpenAPI component schemas and parses into its protobuf message, and a renamed field on
either side breaks the build."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from gateway.asgi import create_app
from gateway.problems import problem_body
from gateway.settings import GatewaySettings
from google.protobuf import json_format
from reviewloop.contract import CONTRACT_MANIFEST, CONTRACT_VERSION
from reviewloop.errors import Code, DomainError
from reviewloop.rpc_errors import from_rpc_error, grpc_code, to_status

from tests.conftest import Api
from tests.contract.conformance import parse_proto, proto_message, renamed, schema_errors
from tests.contract.examples import CANONICAL, NUDGES, PROBLEM, RULE

EXAMPLES = [pytest.param(shape, example, id=name) for shape, name, example in CANONICAL]


def gateway_settings(tmp: Path) -> GatewaySettings:
    return GatewaySettings(
        db_url=f"sqlite+aiosqlite:///{tmp}/gateway.db",
        host="127.0.0.1",
        port=0,
        data_dir=tmp,
        peers={},
        admin_token="unused",
        max_body_bytes=1024,
        backend_timeout_s=1.0,
        otlp_endpoint=None,
    )


def openapi_document(tmp: Path) -> dict[str, Any]:
    return create_app(gateway_settings(tmp)).openapi()


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return openapi_document(tmp_path_factory.mktemp("openapi"))


@pytest.mark.parametrize(("shape", "example"), EXAMPLES)
def test_canonical_example_validates_against_its_component_schema(
    document: dict[str, Any], shape: str, example: dict[str, Any]
) -> None:
    assert schema_errors(document, shape, example) == []


@pytest.mark.parametrize(
    ("shape", "example"),
    [pytest.param(shape, example, id=name) for shape, name, example in CANONICAL if shape != "Problem"],
)
def test_canonical_example_parses_into_its_protobuf_message(shape: str, example: dict[str, Any]) -> None:
    assert proto_message(shape) is not None, f"no protobuf message carries {shape}"
    parsed = parse_proto(shape, example)
    assert parsed.ByteSize() > 0


def test_the_problem_example_travels_as_a_google_rpc_status_and_back() -> None:
    """A Problem's wire form between services is google.rpc.Status (ErrorInfo + RecoveryFacts): the
    canonical example, raised by a service, reaches the agent as exactly the same problem+json."""
    facts = {e["field"]: e["code"] for e in PROBLEM["errors"]}
    raised = DomainError(
        Code(PROBLEM["code"]),
        PROBLEM["detail"],
        state=facts["state"],
        revision=int(facts["revision"]),
        version=int(facts["version"]),
        allowed_actions=[e["code"] for e in PROBLEM["errors"] if e["field"] == "allowed_action"],
    )
    status = to_status(raised)
    wire = grpc.aio.AioRpcError(
        grpc_code(raised),
        grpc.aio.Metadata(),
        grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString())),
        details=status.message,
    )
    assert problem_body(from_rpc_error(wire), PROBLEM["status"]) == PROBLEM


def test_every_manifest_shape_is_a_component_schema(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert set(CONTRACT_MANIFEST["shapes"]) <= set(schemas)
    assert set(CONTRACT_MANIFEST["core_shapes"]) <= {shape for shape, _, _ in CANONICAL}


def test_the_problem_code_enum_is_the_closed_code_enum(document: dict[str, Any]) -> None:
    assert document["components"]["schemas"]["Code"]["enum"] == [code.value for code in Code]


def test_every_operation_answers_failures_with_problem_json(document: dict[str, Any]) -> None:
    for item in document["paths"].values():
        for operation in item.values():
            for status in ("4XX", "5XX"):
                content = operation["responses"][status]["content"]
                assert content["application/problem+json"]["schema"] == {
                    "$ref": "#/components/schemas/Problem"
                }
            assert "422" not in operation["responses"]


def test_every_mutation_declares_the_idempotency_key(document: dict[str, Any]) -> None:
    missing = [
        f"{method.upper()} {path}"
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in ("post", "put", "patch", "delete")
        and not any(
            p["in"] == "header" and p["name"] == "Idempotency-Key" for p in operation.get("parameters", [])
        )
    ]
    assert missing == []


# The negative tests: the guards are not tautologies.


def test_a_renamed_field_in_an_example_fails_the_schema_guard(document: dict[str, Any]) -> None:
    assert schema_errors(document, "Rule", renamed(RULE, "rule_text", "text")) != []
    assert schema_errors(document, "ReviewEvent", renamed(NUDGES["sent"], "seq", "sequence")) != []
    # An optional field renamed is caught too: shapes forbid unknown fields.
    assert schema_errors(document, "Rule", renamed(RULE, "source_review_id", "review_id")) != []


def test_a_renamed_property_in_the_schema_fails_the_canonical_example(document: dict[str, Any]) -> None:
    drifted = copy.deepcopy(document)
    rule = drifted["components"]["schemas"]["Rule"]
    rule["properties"]["text"] = rule["properties"].pop("rule_text")
    rule["required"] = ["text" if name == "rule_text" else name for name in rule["required"]]
    assert schema_errors(drifted, "Rule", RULE) != []


def test_a_renamed_field_fails_the_protobuf_guard() -> None:
    with pytest.raises(json_format.ParseError, match="text"):
        parse_proto("Rule", renamed(RULE, "rule_text", "text"))
    with pytest.raises(json_format.ParseError):
        parse_proto("ReviewEvent", renamed(NUDGES["sent"], "review_id", "review"))


async def test_the_served_openapi_yaml_is_the_checked_document(api: Api, tmp_path: Path) -> None:
    served = yaml.safe_load((await api.http.get("/openapi.yaml")).text)
    assert served["info"]["version"] == CONTRACT_VERSION
    for shape, _, example in CANONICAL:
        assert schema_errors(served, shape, example) == [], shape
    assert served["components"]["schemas"] == openapi_document(tmp_path)["components"]["schemas"]
