"""Admin page "Review sequence": a run's review sequence (spec 003), edited with the shared picker.

A thin renderer of ``reviewloop.review_dispatch.picker.ReviewDispatchViewModel``: the page draws the
view-model's rows (runner, model with effort beside it, WARM/COLD on every row, each row's problems)
and turns the form it posts back into the view-model's operations (add, remove, move, set). Nothing
here validates or normalizes a selection: the view-model does, with the service's own validator. Save
is ``record_run``, the command behind ``PUT /v1/review-rounds/runs/{run_id}``, given that route's body;
the run reads back at ``GET /v1/review-rounds/runs/{run_id}``. Works without JavaScript: every operation
is a form post.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from reviewloop.errors import Code, DomainError, http_status
from reviewloop.review_dispatch.picker import Draft, PickerContext, ReviewDispatchViewModel, RowView
from reviewloop.review_dispatch.selection import RunnerSpec
from reviewloop.shapes import RunIn
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from gateway.commands import budget
from gateway.console import admin, web
from gateway.console.html import page, render
from gateway.console.sessions import Session
from gateway.translate import Json
from gateway.translate.budget import as_review_run, as_runner

router = APIRouter()
PATH = "/console/sequence"
DIMENSIONS = ("runner", "model", "effort", "mode")


async def _catalog(request: Request, session: Session) -> list[RunnerSpec]:
    reply = await budget.list_runners(web.backend(request), session.principal)
    return [RunnerSpec.from_json(as_runner(runner)) for runner in reply.runners]


async def _run(request: Request, session: Session, run_id: str) -> Json:
    return as_review_run(await budget.get_run(web.backend(request), session.principal, run_id))


def _drafts(form: FormData) -> list[Draft]:
    """The rows as the form holds them (``r<index>-<dimension>``), in order."""
    count = web.field(form, "rows")
    if not count.isdigit():
        raise DomainError(Code.BAD_REQUEST, "The form lost its row count; open the page again.")
    return [Draft.from_json({d: web.field(form, f"r{i}-{d}") for d in DIMENSIONS}) for i in range(int(count))]


def _apply(model: ReviewDispatchViewModel, op: str) -> ReviewDispatchViewModel:
    """One button's operation: ``add``, ``remove:<i>``, ``up:<i>``, ``down:<i>``, ``check``."""
    verb, _, where = op.partition(":")
    if verb == "add":
        return model.add()
    if verb in ("remove", "up", "down") and where.isdigit():
        index = int(where)
        if verb == "remove":
            return model.remove(index)
        return model.move(index, index - 1 if verb == "up" else index + 1)
    if verb == "check":
        return model
    raise DomainError(Code.BAD_REQUEST, f"Unknown picker operation {op!r}.")


# --- rendering ---


def _row(view: RowView) -> dict[str, Any]:
    """A picker row and, per dimension, what its control is described by: a wrong dimension points at
    the row's problems, effort at its note when there is one; a form control (not the mode's group) is
    marked invalid too."""
    i = view.number - 1
    described = {}
    for dimension in ("runner", "model", "effort", "mode"):
        ids = [f"r{i}-errors"] if dimension in view.errors or "row" in view.errors else []
        if dimension == "effort" and view.effort_note:
            ids.append(f"r{i}-effort-note")
        invalid = dimension != "mode" and bool(ids) and ids[0] == f"r{i}-errors"
        described[dimension] = {"ids": " ".join(ids), "invalid": invalid}
    return {"i": i, "view": view, "described": described}


def _view(
    request: Request,
    session: Session,
    run: Json,
    model: ReviewDispatchViewModel,
    *,
    refused: DomainError | None = None,
    status: int = 200,
) -> Response:
    stored = run.get("review_sequence")
    body = render(
        "sequence.html",
        session=session,
        path=PATH,
        done=request.query_params.get("done", ""),
        error="",
        refused=refused.detail if refused else "",
        run_id=run["run_id"],
        saved=f"{len(stored)} row(s) saved"
        if stored
        else "none saved: the project review configuration decides",
        sequence_errors=[m for p, m in model.errors().items() if p == "/sequence"],
        rows=[_row(v) for v in model.views()],
    )
    return page("Review sequence", body, session=session, active="sequence", status=status)


def _lookup(session: Session, error: DomainError | None = None) -> Response:
    body = render(
        "sequence.html",
        session=session,
        path=PATH,
        done="",
        error=error.detail if error else "",
        refused="",
        run_id="",
    )
    return page(
        "Review sequence",
        body,
        session=session,
        active="sequence",
        status=200 if error is None else http_status(error.code),
    )


# --- routes ---


@router.get("/sequence")
async def sequence_page(request: Request) -> Response:
    session = await admin.reader(request)
    run_id = request.query_params.get("run_id", "").strip()
    if not run_id:
        return _lookup(session)
    try:
        run = await _run(request, session, run_id)
    except web.REFUSALS as exc:
        return _lookup(session, web.as_domain(exc))
    model = ReviewDispatchViewModel.parse(
        await _catalog(request, session), run.get("review_sequence"), PickerContext.for_run(run)
    )
    return _view(request, session, run, model)


@router.post("/sequence/{run_id}")
async def sequence_post(request: Request, run_id: str) -> Response:
    session, form = await admin.writer(request)
    run = await _run(request, session, run_id)
    model = ReviewDispatchViewModel.of(
        await _catalog(request, session), _drafts(form), PickerContext.for_run(run)
    )
    op = web.field(form, "op", "check")
    if op != "save":
        try:
            model = _apply(model, op)
        except DomainError as bad_op:
            return _view(request, session, run, model, refused=bad_op, status=http_status(bad_op.code))
        return _view(request, session, run, model)
    if model.errors():
        fix = DomainError(Code.BAD_REQUEST, "fix the rows marked below, then save again.")
        return _view(request, session, run, model, refused=fix, status=422)

    async def save() -> None:
        body = web.shaped(RunIn, review_sequence=model.to_wire())
        await budget.record_run(web.backend(request), session.principal, run_id, body)

    async def refused(error: DomainError) -> Response:
        return _view(request, session, run, model, refused=error, status=http_status(error.code))

    query = urlencode({"run_id": run_id, "done": "sequence_saved"})
    return await web.act(save, RedirectResponse(f"{PATH}?{query}", status_code=303), refused)
