"""One declaration per JSON shape: every body a route reads and every answer it gives is a model of
``reviewloop.shapes``, published under its own name, and no two shapes publish the same component name.
(Ruff's TID251 refuses a pydantic model declared anywhere else; these tests catch what an import ban
cannot: a route answering an inline schema, or a shape shadowed by another of the same name.)"""

from __future__ import annotations

import copy
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.routing import APIRoute
from gateway.asgi import create_app
from gateway.routes import ROUTERS
from gateway.translate import page
from gateway.translate.budget import as_gate_decision, as_runner
from gateway.translate.events import as_review_event
from gateway.translate.reviews import as_review, as_review_chat_result, as_review_turn, as_submit_result
from gateway.translate.rules import as_category, as_rule_audit, as_rule_list, as_rule_revision
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from pydantic.json_schema import models_json_schema
from reviewloop import shapes
from reviewloop.budget.v1 import budget_pb2
from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.review.v1 import review_pb2
from reviewloop.rules.v1 import rules_pb2

from tests.contract.test_shapes import gateway_settings, openapi_document

ROOT = Path(__file__).resolve().parents[2]
SHAPE_NAMES = {model.__name__ for model in shapes.SHAPES}
JSON = "application/json"
EVENT_STREAM = "text/event-stream"


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return openapi_document(tmp_path_factory.mktemp("openapi"))


def misnamed(models: list[type[Any]]) -> list[str]:
    """Models that would not be published under their own name: two models of one name get
    module-qualified component names, which is how a second declaration of a shape shows up."""
    refs, _ = models_json_schema([(model, "validation") for model in models])
    return sorted(
        f"{model.__module__}.{model.__qualname__} -> {ref['$ref'].rsplit('/', 1)[-1]}"
        for (model, _), ref in refs.items()
        if ref["$ref"].rsplit("/", 1)[-1] != model.__name__
    )


def _ref_names(schema: dict[str, Any]) -> list[str] | None:
    """The component names ``schema`` is (a $ref, or anyOf/oneOf of $refs); None when it is inline."""
    branches = [schema] if "$ref" in schema else schema.get("anyOf") or schema.get("oneOf") or []
    if not branches or any("$ref" not in branch for branch in branches):
        return None
    return [branch["$ref"].rsplit("/", 1)[-1] for branch in branches]


def untyped_operations(document: dict[str, Any]) -> list[str]:
    """Every JSON request body and success answer of ``document`` that is not a shapes component."""
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            body = operation.get("requestBody", {}).get("content", {}).get(JSON)
            if body is not None:
                names = _ref_names(body["schema"])
                if names is None or not set(names) <= SHAPE_NAMES:
                    found.append(f"{where} request: {names or 'inline schema'}")
            for status, response in operation["responses"].items():
                if status.startswith("2"):
                    content = response.get("content", {})
                    # A server-sent event stream documents each event's data as a shape, too.
                    answer = content.get(JSON) or content.get(EVENT_STREAM, {})
                    names = _ref_names(answer.get("schema", {}))
                    if names is None or not set(names) <= SHAPE_NAMES:
                        found.append(f"{where} {status}: {names or 'untyped'}")
    return found


def test_no_two_shapes_publish_the_same_component_name() -> None:
    assert misnamed(list(shapes.SHAPES)) == []
    assert len(SHAPE_NAMES) == len(shapes.SHAPES)


def test_every_route_reads_and_answers_a_shape(document: dict[str, Any]) -> None:
    assert untyped_operations(document) == []


def test_every_component_is_a_shape_or_what_a_shape_refers_to(document: dict[str, Any]) -> None:
    assert set(document["components"]["schemas"]) <= set(shapes.component_schemas())


def _is_shape(model: Any) -> bool:
    return isinstance(model, type) and getattr(shapes, model.__name__, None) is model


def test_every_route_model_is_the_shapes_class_itself(tmp_path: Path) -> None:
    """Not merely a class of the same name: the very model ``reviewloop.shapes`` declares."""
    app = create_app(gateway_settings(tmp_path))
    routes = [r for router in ROUTERS for r in router.routes] + list(app.router.routes)
    checked = 0
    for route in routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        if route.body_field is not None:
            assert _is_shape(route.body_field.field_info.annotation), route.path
        answers = typing.get_args(route.response_model) or (route.response_model,)
        assert all(_is_shape(model) for model in answers), (route.path, route.response_model)
        checked += 1
    assert checked >= 60


# The negative tests: the guards are not tautologies.


def test_a_second_shape_of_the_same_name_is_caught() -> None:
    twin = type("Review", (shapes.Review,), {"__module__": "tests.contract.twin"})
    assert misnamed([*shapes.SHAPES, twin]) != []


def test_an_inline_or_foreign_schema_is_caught(document: dict[str, Any]) -> None:
    drifted = copy.deepcopy(document)
    send = drifted["paths"]["/v1/messages"]["post"]
    send["requestBody"]["content"][JSON]["schema"] = {"type": "object", "properties": {"text": {}}}
    send["responses"]["202"]["content"][JSON]["schema"] = {"$ref": "#/components/schemas/SendOut"}
    assert untyped_operations(drifted) == [
        "POST /v1/messages request: inline schema",
        "POST /v1/messages 202: ['SendOut']",
    ]


# Realistic values for the string fields the shapes type as closed sets, and the JSON carried as text.
_STRINGS = {
    "Rule.rule_layer": "project",
    "Rule.scope": "category",
    "Rule.kind": "soft",
    "Rule.author_kind": "human",
    "Rule.status": "active",
    "Category.scope": "org_shared",
    "Category.state": "supervised",
    "Category.author_kind": "agent",
    "GraduationStatus.state": "supervised",
    "GraduationStatus.next_state": "auto_notify",
    "Review.send_path": "human_reviewed",
    "Review.mode": "review",
    "Turn.actor_kind": "human",
    "SubmitResponse.status": "queued_for_review",
    "Intent.meta_json": '{"goal": "book_meeting"}',
    "Turn.diff_json": '{"fields_changed": ["body_text"], "hunks": [{"field": "body_text", "op": "replace",'
    ' "before": "a\\n", "after": "b\\n", "before_start": 1, "after_start": 1}]}',
    "Nudge.payload_json": '{"state": "sent", "message_id": "msg_1"}',
    "Delivery.status": "send_needs_reconciliation",
    "EscalationTarget.kind": "person",
    "EscalationTarget.id": "key_01J9Z3W6Q2X8V5T4R3P2N1M0KA",
}


def filled(message: Message, depth: int = 0) -> Message:
    """``message`` with every field set (two of each repeated one), as a backend would answer."""
    for field in message.DESCRIPTOR.fields:
        value: Any = getattr(message, field.name)
        if field.message_type is not None and field.message_type.full_name == "google.protobuf.Struct":
            value.update({"goal": "book_meeting", "touches": 2, "tags": ["a", None, True, 1.5]})
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            value["key"] = "value"
        elif field.message_type is not None and field.message_type.full_name == "google.protobuf.Timestamp":
            for stamp in [value.add(), value.add()] if field.is_repeated else [value]:
                stamp.FromSeconds(1_760_000_000)
        elif field.message_type is not None:
            if depth < 3:
                for _ in range(2 if field.is_repeated else 1):
                    filled(value.add() if field.is_repeated else value, depth + 1)
        else:
            scalar: Any = {
                FieldDescriptor.TYPE_STRING: _STRINGS.get(f"{message.DESCRIPTOR.name}.{field.name}", "x"),
                FieldDescriptor.TYPE_BYTES: b"%PDF",
                FieldDescriptor.TYPE_BOOL: True,
                FieldDescriptor.TYPE_DOUBLE: 0.5,
                FieldDescriptor.TYPE_ENUM: 1,
            }.get(field.type, 1)
            if field.is_repeated:
                value.extend([scalar, scalar])
            else:
                setattr(message, field.name, scalar)
    return message


# Every answer a route writes unvalidated (gateway.responses.encoded), from a full backend reply.
UNVALIDATED: list[tuple[type[Any], Any]] = [
    (shapes.Review, lambda: as_review(filled(review_pb2.Review()))),
    (shapes.Review, lambda: as_review(review_pb2.Review(kind=1, state=1))),  # every optional absent
    (shapes.SubmitForReviewResult, lambda: as_submit_result(filled(review_pb2.SubmitResponse()))),
    (shapes.ReviewList, lambda: page([as_review(filled(review_pb2.Review()))], "c")),
    (shapes.ReviewTurnList, lambda: page([as_review_turn(filled(review_pb2.Turn()))])),
    (shapes.ReviewChatResult, lambda: as_review_chat_result(filled(review_pb2.PostChatResponse()))),
    (shapes.ReviewEventsResult, lambda: {"events": [as_review_event(filled(nudge_pb2.Nudge()))]}),
    (shapes.RuleSnapshot, lambda: as_rule_list(filled(rules_pb2.GetRulesResponse()))),
    (shapes.RuleAudit, lambda: as_rule_audit(filled(rules_pb2.RuleHistory()))),
    (
        shapes.RuleHistory,
        lambda: {"lineage_id": "rln_1", "revisions": [as_rule_revision(filled(rules_pb2.Rule()))]},
    ),
    (
        shapes.CategoryList,
        lambda: page([as_category(filled(rules_pb2.Category()))]),
    ),
    (shapes.RunnerList, lambda: {"runners": [as_runner(filled(budget_pb2.Runner()))]}),
    (shapes.GateDecisionList, lambda: {"decisions": [as_gate_decision(filled(budget_pb2.GateDecision()))]}),
]


@pytest.mark.parametrize(("shape", "build"), UNVALIDATED, ids=[shape.__name__ for shape, _ in UNVALIDATED])
def test_an_unvalidated_answer_is_exactly_its_shape(shape: type[Any], build: Any) -> None:
    """The routes that skip response validation for speed (gateway.responses) still answer their shape,
    value for value what validating against it would have answered (48, not 48.0; "...Z" stamps)."""
    answer = build()
    validated = shape.model_validate(answer).model_dump(mode="json", exclude_unset=True)
    assert orjson.dumps(answer, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        validated, option=orjson.OPT_SORT_KEYS
    )


RUFF = Path(sys.executable).parent / "ruff"


def _ruff(path: str, source: str) -> str:
    """Ruff's findings for ``source`` as if it were the repository file ``path`` (the project's config)."""
    result = subprocess.run(
        [str(RUFF), "check", "--no-cache", "--output-format", "concise", "--stdin-filename", path, "-"],
        input=source,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.stdout


@pytest.mark.parametrize(
    "source",
    [
        "from pydantic import BaseModel\n",
        "import pydantic\n\nModel = pydantic.RootModel\n",
        "from reviewloop.shapes import Shape\n",
    ],
    ids=["base-model", "root-model", "shape-base"],
)
def test_a_model_declared_outside_shapes_fails_lint(source: str) -> None:
    assert "TID251" in _ruff("services/gateway/routes/leak.py", source)
    assert "TID251" not in _ruff("libs/reviewloop/shapes/reviews.py", source)
