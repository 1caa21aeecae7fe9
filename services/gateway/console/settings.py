"""Admin page "Settings": the risk dial with its inheritance, backlog pacing, the review policy (the org's
account default beside the project's override), blocks and suppressions, and API keys. Each form's verb is
the command its admin REST route calls, given that route's body shape: a value the shape refuses is the
route's 422, shown on the page with what was typed."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from reviewloop.errors import DomainError
from reviewloop.review.v1 import review_pb2
from reviewloop.shapes import (
    RISK_DIAL_FIELDS,
    AccountRiskDial,
    AddressIn,
    ApiKeyIn,
    PacingSettingsIn,
    PolicyIn,
    RiskDialIn,
)
from starlette.datastructures import FormData
from starlette.responses import Response

from gateway import store
from gateway.auth import Caller
from gateway.commands import admin as commands
from gateway.commands.rules import pacing_settings, risk_dial, set_pacing_settings, set_risk_dial
from gateway.console import admin, web
from gateway.console.html import page, render
from gateway.console.sessions import Session
from gateway.translate.reviews import as_contact
from gateway.translate.rules import as_risk_dial

router = APIRouter()
PATH = "/console/settings"
POLICIES = ("require_review", "allow_direct", "auto_send_graduated")
PACING_FIELDS = tuple(PacingSettingsIn.model_fields)


def _json_kind(name: str) -> type:
    """A dial field's JSON type (float, int or bool), as the form's text is read into it."""
    kind = AccountRiskDial.model_fields[name].annotation
    return kind if isinstance(kind, type) else str


DIAL_KINDS = {name: _json_kind(name) for name in RISK_DIAL_FIELDS}


def _shown(value: object) -> str:
    return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _dial_fields(prefix: str, values: dict[str, Any], form: FormData | None) -> list[dict[str, Any]]:
    """The dial's fields as a form shows them: the value the page showed (so a save sends only what
    changed), or what the admin typed when this very form was refused; a bool field is a select."""
    typed = web.typed(form, prefix)
    return [
        {
            "name": name,
            "shown": _shown(values.get(name)),
            "value": typed(name, _shown(values.get(name))),
            "boolean": DIAL_KINDS[name] is bool,
        }
        for name in RISK_DIAL_FIELDS
    ]


def _dial_values(form: FormData, *, changed_only: bool) -> dict[str, object]:
    """The dial fields as the form set them: a value, or blank (``null``: inherit / back to the default).
    The account merges, so it sends only the fields the reviewer changed; the others keep inheriting."""
    values: dict[str, object] = {}
    for name in RISK_DIAL_FIELDS:
        text = web.field(form, name).strip()
        if changed_only and text == web.field(form, f"was_{name}").strip():
            continue
        values[name] = admin.as_json(text, DIAL_KINDS[name]) if text else None
    return values


async def _pacing(request: Request, session: Session, form: FormData | None) -> list[tuple[str, str]]:
    """Backlog pacing's fields and the values they show."""
    reply = await pacing_settings(web.backend(request), session.principal)
    typed = web.typed(form, "pacing")
    return [(n, typed(n, str(getattr(reply.values, n)))) for n in PACING_FIELDS]


POLICY_LAYERS = {
    "account": "Account default (every project of the org without its own override)",
    "project": "This project's override",
}


def _policy_layers(policy: review_pb2.ReviewPolicy, form: FormData | None) -> list[dict[str, Any]]:
    """The org's account default beside the project's override, each with its choices ("not set" only
    while the layer holds nothing)."""
    held = {"account": policy.account_default, "project": policy.project_override}
    return [
        {
            "layer": layer,
            "label": label,
            "held": held[layer],
            "picked": web.typed(form, f"policy-{layer}")("policy", held[layer]),
            "options": [(p, p or "not set") for p in ("", *POLICIES) if p or not held[layer]],
        }
        for layer, label in POLICY_LAYERS.items()
    ]


@router.get("/settings")
async def settings_page(request: Request) -> Response:
    return await _settings(request, await admin.reader(request))


async def _settings(
    request: Request,
    session: Session,
    issued: str = "",
    *,
    form: FormData | None = None,
    error: DomainError | None = None,
) -> Response:
    backend, principal = web.backend(request), session.principal
    dial = as_risk_dial(await risk_dial(backend, principal))
    policy = await commands.review_policy(backend, principal)
    categories = await admin.categories(request, session)
    overrides = {c["category_id"]: c for c in dial["categories"]}
    async with request.app.state.db.engine.connect() as conn:
        keys = await store.project_keys(conn, principal.project_id)
    listed = await commands.list_contacts(backend, principal)
    body = render(
        "settings.html",
        session=session,
        done=request.query_params.get("done", ""),
        error=error,
        issued=issued,
        dial_head=["Scope", *RISK_DIAL_FIELDS],
        dial_account=[_shown(dial["account"].get(n)) for n in RISK_DIAL_FIELDS],
        dial_overrides=[
            {
                "id": c["category_id"],
                "cells": [(_shown(c["effective"].get(n)), c.get(n) is not None) for n in RISK_DIAL_FIELDS],
            }
            for c in dial["categories"]
        ],
        account_fields=_dial_fields("dial-account", dial["account"], form),
        category_forms=[
            {
                "id": c["id"],
                "name": c["name"],
                "open": form is not None and web.field(form, "form") == f"dial-{c['id']}",
                "fields": _dial_fields(f"dial-{c['id']}", overrides.get(c["id"], {}), form),
            }
            for c in categories
        ],
        pacing=await _pacing(request, session, form),
        policy=policy,
        policy_layers=_policy_layers(policy, form),
        contacts=[as_contact(c) for c in listed.contacts],
        contact=web.typed(form, "contacts")("address", ""),
        keys=keys,
        key=web.typed(form, "key"),
        key_kinds=[(k, k) for k in ("human", "agent", "review_agent", "admin")],
    )
    return page("Settings", body, session=session, active="settings", status=admin.status(error))


def _dial_body(form: FormData) -> RiskDialIn:
    """The form as ``set_risk_dial``'s body: the account's changed fields, or one category's overrides."""
    category_id = web.field(form, "category_id")
    if category_id:
        values = _dial_values(form, changed_only=False)
        return web.shaped(RiskDialIn, categories=[{"category_id": category_id, **values}])
    return web.shaped(RiskDialIn, account=_dial_values(form, changed_only=True))


@router.post("/settings/risk-dial")
async def save_risk_dial(request: Request) -> Response:
    session, form = await admin.writer(request)
    return await web.act(
        lambda: set_risk_dial(web.backend(request), session.principal, _dial_body(form)),
        admin.done(PATH, "risk_dial_saved"),
        admin.again(_settings, request, session, form),
    )


def _pacing_body(form: FormData) -> PacingSettingsIn:
    """The form as ``set_pacing_settings``'s body: a blank field returns to its default."""
    fields = {n: web.field(form, n).strip() for n in PACING_FIELDS}
    return web.shaped(
        PacingSettingsIn, **{n: admin.as_json(t, int) if t else None for n, t in fields.items()}
    )


@router.post("/settings/pacing")
async def save_pacing(request: Request) -> Response:
    session, form = await admin.writer(request)
    return await web.act(
        lambda: set_pacing_settings(web.backend(request), session.principal, _pacing_body(form)),
        admin.done(PATH, "pacing_saved"),
        admin.again(_settings, request, session, form),
    )


@router.post("/settings/review-policy")
async def save_review_policy(request: Request) -> Response:
    session, form = await admin.writer(request)
    account = web.field(form, "layer") == "account"
    return await web.act(
        lambda: commands.set_review_policy(
            web.backend(request),
            session.principal,
            web.shaped(PolicyIn, policy=web.field(form, "policy")),
            account_default=account,
        ),
        admin.done(PATH, "account_default_saved" if account else "review_policy_saved"),
        admin.again(_settings, request, session, form),
    )


def _listed(name: str) -> Literal["blocks", "suppressions"]:
    """The recipient list a contact form names (``block``/``blocked``, else suppressions)."""
    return "blocks" if name in ("block", "blocked") else "suppressions"


@router.post("/settings/contacts/remove")
async def remove_contact(request: Request) -> Response:
    session, form = await admin.writer(request)
    listed = _listed(web.field(form, "list"))
    return await web.act(
        lambda: commands.remove_contact(
            web.backend(request), session.principal, listed, web.field(form, "address")
        ),
        admin.done(PATH, "unblocked" if listed == "blocks" else "unsuppressed"),
        admin.again(_settings, request, session, form),
    )


@router.post("/settings/contacts")
async def add_contact(request: Request) -> Response:
    session, form = await admin.writer(request)
    return await web.act(
        lambda: commands.add_contact(
            web.backend(request),
            session.principal,
            _listed(web.field(form, "list")),
            web.shaped(AddressIn, address=web.field(form, "address")),
        ),
        admin.done(PATH, "contact_saved"),
        admin.again(_settings, request, session, form),
    )


def _caller(session: Session) -> Caller:
    return Caller(principal=session.principal, key_id=session.key_id)


@router.post("/settings/api-keys")
async def issue_key(request: Request) -> Response:
    session, form = await admin.writer(request)

    async def issue() -> str:
        kind, email = web.field(form, "actor_kind"), web.field(form, "email").strip()
        body = web.shaped(
            ApiKeyIn,
            project_id=session.principal.project_id,
            actor_kind=kind,
            name=web.field(form, "name") or f"console {kind}",
            email=email or None,
        )
        _, secret = await commands.issue_api_key(request, _caller(session), body)
        return secret

    return await web.act(
        issue,
        lambda secret: _settings(request, session, issued=secret),
        admin.again(_settings, request, session, form),
    )


@router.post("/settings/api-keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: str) -> Response:
    session, form = await admin.writer(request)
    return await web.act(
        lambda: commands.revoke_api_key(request, _caller(session), key_id),
        admin.done(PATH, "key_revoked"),
        admin.again(_settings, request, session, form),
    )
