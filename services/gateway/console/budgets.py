"""Admin page "Budgets": a run's review-round budget (N/L, its extension) and a form granting an extension,
the same command as ``POST /v1/runs/{run_id}/extend-review-budget`` given that route's body."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from reviewloop.budget.v1 import budget_pb2
from reviewloop.errors import DomainError
from reviewloop.shapes import ExtendIn
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from gateway.commands.budget import extend_review_budget, round_budget
from gateway.console import admin, web
from gateway.console.html import page, render
from gateway.console.sessions import Session
from gateway.translate.budget import as_round_budget

router = APIRouter()


@router.get("/budgets")
async def budgets_page(request: Request) -> Response:
    return await _budgets_view(request, await admin.reader(request))


async def _budgets_view(
    request: Request, session: Session, *, form: FormData | None = None, error: DomainError | None = None
) -> Response:
    run_id = (web.field(form, "run_id") if form else request.query_params.get("run_id", "")).strip()
    budget, lookup_error = None, ""
    if run_id:
        try:
            budget = as_round_budget(await round_budget(web.backend(request), session.principal, run_id))
        except web.REFUSALS as exc:
            lookup_error = web.as_domain(exc).detail
    body = render(
        "budgets.html",
        session=session,
        done=request.query_params.get("done", ""),
        error=error,
        run_id=run_id,
        budget=budget,
        lookup_error=lookup_error,
        typed=web.typed(form, "extend"),
    )
    return page("Budgets", body, session=session, active="budgets", status=admin.status(error))


@router.post("/budgets/extend")
async def extend(request: Request) -> Response:
    session, form = await admin.writer(request)
    run_id = web.field(form, "run_id")

    async def grant() -> budget_pb2.ExtensionReceipt:
        body = web.shaped(
            ExtendIn,
            head_sha=web.field(form, "head_sha").strip(),
            limit=admin.as_json(web.field(form, "new_limit").strip(), int),
            expected_limit=admin.as_json(web.field(form, "expected_prior_limit"), int),
            scope_brief=web.field(form, "scope_brief"),
        )
        idem = web.field(form, "idem")
        return await extend_review_budget(
            request, web.backend(request), session.principal, run_id, body, idem
        )

    query = urlencode({"run_id": run_id, "done": "extension_granted"})
    return await web.act(
        grant,
        RedirectResponse(f"/console/budgets?{query}", status_code=303),
        admin.again(_budgets_view, request, session, form),
    )
