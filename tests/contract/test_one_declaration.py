"""One declaration per JSON shape: every body a route reads and every answer it gives is a model of
``reviewloop.shapes``, published under its own name, and no two shapes publish the same component name.
(Ruff's TID251 refuses a pydantic model declared anywhere else; these tests catch what an import ban
cannot: a route answering an inline schema, or a shape shadowed by another of the same name.)"""

from __future__ import annotations

import copy
import typing
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from gateway.asgi import create_app
from gateway.routes import ROUTERS
from gateway.translate.reviews import as_review, as_submit_result
from pydantic.json_schema import models_json_schema
from reviewloop import shapes
from reviewloop.review.v1 import review_pb2

from tests.contract.test_shapes import gateway_settings, openapi_document

SHAPE_NAMES = {model.__name__ for model in shapes.SHAPES}
JSON = "application/json"


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
                    names = _ref_names(response.get("content", {}).get(JSON, {}).get("schema", {}))
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


def _full_review() -> review_pb2.Review:
    review = review_pb2.Review(
        id="rr_1",
        org_id="org_1",
        project_id="prj_1",
        agent_id="agt_1",
        category_id="cat_1",
        kind=review_pb2.MESSAGE_KIND_REPLY,
        state=review_pb2.REVIEW_STATE_SENT,
        revision=2,
        version=5,
        closed=True,
        to=["vp@acme.com"],
        cc=["cc@acme.com"],
        subject="Re: Q3 pilot",
        body_text="Can you do Thursday 2pm?",
        intent=review_pb2.Intent(summary="Book the pilot call", meta_json='{"goal": "book_meeting"}'),
        message_id="msg_1",
        thread_ref="thread_1",
        send_path="human_reviewed",
        send_error="",
        gate_outcome="",
        body_html="<p>Can you do Thursday 2pm?</p>",
        reply_to="me@example.com",
        headers={"X-Campaign": "q3"},
        attachments=[
            review_pb2.Attachment(filename="a.pdf", content_type="application/pdf", content=b"%PDF")
        ],
        parent_message_id="msg_0",
        from_address="me@example.com",
        confidence=0.9,
        turns=[
            review_pb2.Turn(
                id="turn_1",
                seq=1,
                turn_type="decision",
                actor_kind="human",
                body="tightened the CTA",
                revision=2,
                action="edit",
                diff_json='{"fields_changed": ["body_text"], "hunks": [{"field": "body_text", "op": "replace",'
                ' "before": "a\\n", "after": "b\\n", "before_start": 1, "after_start": 1}]}',
            )
        ],
    )
    for stamp in (
        review.created_at,
        review.updated_at,
        review.decided_at,
        review.sent_at,
        review.turns[0].created_at,
    ):
        stamp.FromSeconds(1_760_000_000)
    return review


def test_the_hot_routes_unvalidated_answers_conform_to_their_shapes() -> None:
    """get_review and the submit verbs skip response validation for speed (gateway.responses): what their
    constructors build must still be exactly their shape."""
    review = _full_review()
    shapes.Review.model_validate(as_review(review))
    shapes.Review.model_validate(as_review(review_pb2.Review(kind=1, state=1)))
    submitted = review_pb2.SubmitResponse(status="sent", review=review)
    shapes.SubmitResult.model_validate(as_submit_result(submitted))
