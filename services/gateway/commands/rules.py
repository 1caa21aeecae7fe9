"""The rules service's verbs asked from more than one place (the agent plane's routes, the admin routes and
the console's pages): the verbs on a rule's lineage (retire, undo, promote, approve, reject), naming the
rev the caller read (a stale one is 409), a category's update, and the reads of the category registry and
the risk dial."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reviewloop.rules.v1 import rules_pb2
from reviewloop.shapes import UpdateCategoryRequest
from reviewloop.tenancy import Principal

from gateway.backends import Backends

LineageVerb = Literal["RetireRule", "UndoRule", "PromoteRule", "ApproveRule", "RejectRule"]


@dataclass(frozen=True)
class RuleAction:
    """``verb`` on ``lineage_id`` at the ``rev`` the caller read; ``to_layer`` (``org``) only to promote a
    project rule to house style."""

    verb: LineageVerb
    lineage_id: str
    rev: int
    idempotency_key: str = ""
    to_layer: str = ""


async def lineage_verb(backend: Backends, principal: Principal, action: RuleAction) -> rules_pb2.Rule:
    asked = rules_pb2.RuleActionRequest(
        principal=principal.to_proto(),
        lineage_id=action.lineage_id,
        expected_rev=action.rev,
        idempotency_key=action.idempotency_key,
        to_layer=action.to_layer,
    )
    reply: rules_pb2.Rule = await getattr(backend.rules, action.verb)(asked, timeout=backend.timeout_s)
    return reply


async def update_category(
    backend: Backends, principal: Principal, category_id: str, body: UpdateCategoryRequest
) -> rules_pb2.Category:
    """Rename, redescribe or lock a category; a field left out is untouched."""
    patch = rules_pb2.UpdateCategoryRequest(principal=principal.to_proto(), category_id=category_id)
    if body.name is not None:
        patch.name = body.name
    if body.description is not None:
        patch.description = body.description
    if body.never_graduate is not None:
        patch.never_graduate = body.never_graduate
    reply: rules_pb2.Category = await backend.rules.UpdateCategory(patch, timeout=backend.timeout_s)
    return reply


async def list_categories(
    backend: Backends, principal: Principal, *, cursor: str = "", limit: int = 200
) -> rules_pb2.ListCategoriesResponse:
    """A page of the project's category registry."""
    request = rules_pb2.ListCategoriesRequest(principal=principal.to_proto(), cursor=cursor, limit=limit)
    reply: rules_pb2.ListCategoriesResponse = await backend.rules.ListCategories(
        request, timeout=backend.timeout_s
    )
    return reply


async def risk_dial(backend: Backends, principal: Principal, category_id: str = "") -> rules_pb2.RiskDial:
    """The project's risk dial, or a category's when ``category_id`` names one."""
    request = rules_pb2.GetRiskDialRequest(principal=principal.to_proto(), category_id=category_id)
    reply: rules_pb2.RiskDial = await backend.rules.GetRiskDial(request, timeout=backend.timeout_s)
    return reply
