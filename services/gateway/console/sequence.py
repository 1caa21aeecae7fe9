"""Admin page "Review sequence": a run's review sequence (spec 003), edited with the shared picker.

A thin renderer of ``reviewloop.review_dispatch.picker.ReviewDispatchViewModel``: the page draws the
view-model's rows (runner, model with effort beside it, WARM/COLD on every row, each row's problems)
and turns the form it posts back into the view-model's operations (add, remove, move, set). Nothing
here validates or normalizes a selection: the view-model does, with the service's own validator. Save
is ``RecordRun``, the call behind ``PUT /v1/review-rounds/runs/{run_id}``; the run reads back at
``GET /v1/review-rounds/runs/{run_id}``. Works without JavaScript: every operation is a form post.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from reviewloop.budget.v1 import budget_pb2
from reviewloop.errors import Code, DomainError, http_status
from reviewloop.review_dispatch.picker import Choice, Draft, PickerContext, ReviewDispatchViewModel, RowView
from reviewloop.review_dispatch.selection import RunnerSpec
from reviewloop.shapes import SelectionIn
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from gateway.console import web
from gateway.console.html import csrf_field, error_box, h, page
from gateway.console.sessions import Session
from gateway.translate import Json
from gateway.translate.budget import as_review_run, as_runner, selection

router = APIRouter()
PATH = "/console/sequence"
DIMENSIONS = ("runner", "model", "effort", "mode")


async def _admin(request: Request) -> Session:
    session = await web.reader(request)
    web.require_admin(session)
    return session


async def _catalog(request: Request, session: Session) -> list[RunnerSpec]:
    reply = await web.call(
        web.backend(request).budget.ListRunners,
        budget_pb2.ListRunnersRequest(principal=session.principal.to_proto()),
        request,
    )
    return [RunnerSpec.from_json(as_runner(runner)) for runner in reply.runners]


async def _run(request: Request, session: Session, run_id: str) -> Json:
    reply = await web.call(
        web.backend(request).budget.GetRun,
        budget_pb2.GetRunRequest(principal=session.principal.to_proto(), run_id=run_id),
        request,
    )
    return as_review_run(reply)


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


def _select(row: int, dimension: str, label: str, choices: tuple[Choice, ...], described: str) -> str:
    options = "".join(
        f'<option value="{h(c.value)}"{" selected" if c.selected else ""}>{h(c.label)}</option>'
        for c in choices
    )
    return (
        f'<div class="picker-field"><label for="r{row}-{dimension}">{h(label)}</label>'
        f'<select id="r{row}-{dimension}" name="r{row}-{dimension}"{described}>{options}</select></div>'
    )


def _row(view: RowView, rows: int) -> str:
    i = view.number - 1
    error_id = f"r{i}-errors"
    note_id = f"r{i}-effort-note"

    def described(dimension: str, control: bool = True) -> str:
        """A wrong dimension points at the row's problems, effort at its note when there is one; a
        form control (not the mode's group) is marked invalid too."""
        ids = [error_id] if dimension in view.errors or "row" in view.errors else []
        if dimension == "effort" and view.effort_note:
            ids.append(note_id)
        invalid = ' aria-invalid="true"' if control and ids and ids[0] == error_id else ""
        return f' aria-describedby="{" ".join(ids)}"{invalid}' if ids else ""

    modes = "".join(
        f'<label class="check"><input type="radio" name="r{i}-mode" value="{h(c.value)}"'
        f"{' checked' if c.selected else ''}> {h(c.label)}</label>"
        for c in view.modes
    )
    moves = []
    if i > 0:
        moves.append(f'<button type="submit" name="op" value="up:{i}">Move row {view.number} up</button>')
    if i < rows - 1:
        moves.append(f'<button type="submit" name="op" value="down:{i}">Move row {view.number} down</button>')
    moves.append(f'<button type="submit" name="op" value="remove:{i}">Remove row {view.number}</button>')
    note = f'<p class="picker-note" id="{note_id}">{h(view.effort_note)}</p>' if view.effort_note else ""
    listed = "".join(f"<li>{h(dimension)}: {h(message)}</li>" for dimension, message in view.errors.items())
    problems = (
        f'<div class="error" id="{error_id}" role="alert"><p>Row {view.number} cannot be saved:</p>'
        f"<ul>{listed}</ul></div>"
        if view.errors
        else ""
    )
    return f"""<fieldset class="picker-row" data-row="{view.number}"{' data-invalid="true"' if view.errors else ""}>
<legend>{h(view.title)}</legend>
<div class="picker-fields">
{_select(i, "runner", "Runner", view.runners, described("runner"))}
{_select(i, "model", "Model", view.models, described("model"))}
{_select(i, "effort", "Effort", view.efforts, described("effort"))}
<fieldset class="picker-mode"{described("mode", control=False)}><legend>Mode</legend>{modes}</fieldset>
</div>
{note}{problems}
<div class="actions">{"".join(moves)}</div>
</fieldset>"""


def _view(
    request: Request,
    session: Session,
    run: Json,
    model: ReviewDispatchViewModel,
    *,
    refused: DomainError | None = None,
    status: int = 200,
) -> Response:
    run_id = run["run_id"]
    views = model.views()
    sequence_errors = [m for p, m in model.errors().items() if p == "/sequence"]
    done = request.query_params.get("done", "")
    notice = f'<p class="notice" role="status">{h(done.replace("_", " "))}.</p>' if done else ""
    refusal = (
        f'<div class="error" role="alert" data-autofocus tabindex="-1"><p>Refused: {h(refused.detail)}</p>'
        "<p>Nothing was saved; the rows are as you left them.</p></div>"
        if refused
        else ""
    )
    whole = "".join(error_box(m) for m in sequence_errors)
    rows = "".join(_row(v, len(views)) for v in views)
    stored = run.get("review_sequence")
    saved = (
        f"{len(stored)} row(s) saved" if stored else "none saved: the project review configuration decides"
    )
    body = f"""{notice}{refusal}
<form method="get" action="{PATH}">
  <label for="run">Run id</label><input type="text" id="run" name="run_id" value="{h(run_id)}">
  <p><button type="submit">Open the run's review sequence</button></p></form>
<h2>Run {h(run_id)}</h2>
<p>Each row is one qualifying review publication requires; row 1 also selects the pipeline review and
its rechecks. Effort sits beside model; "runner default" picks the default it names. Every row is WARM
(continue its review lineage) or COLD (a fresh session over the whole diff). Stored sequence: {h(saved)}.</p>
<form method="post" action="{PATH}/{h(run_id)}" class="picker">{csrf_field(session)}
<input type="hidden" name="rows" value="{len(views)}">
{whole}{rows}
<div class="actions">
<button type="submit" name="op" value="add">Add a row</button>
<button type="submit" name="op" value="check">Check the rows</button>
<button type="submit" name="op" value="save">Save the sequence</button>
</div>
</form>"""
    return page("Review sequence", body, session=session, active="sequence", status=status)


def _lookup(session: Session, error: DomainError | None = None) -> Response:
    body = f"""{error_box(error.detail) if error else ""}
<form method="get" action="{PATH}">
  <label for="run">Run id</label><input type="text" id="run" name="run_id" required>
  <p><button type="submit">Open the run's review sequence</button></p></form>"""
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
    session = await _admin(request)
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
    session, form = await web.writer(request)
    web.require_admin(session)
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
        await web.call(
            web.backend(request).budget.RecordRun,
            budget_pb2.RecordRunRequest(
                principal=session.principal.to_proto(),
                run_id=run_id,
                review_sequence=[selection(SelectionIn.model_validate(row)) for row in model.to_wire()],
            ),
            request,
        )

    async def refused(error: DomainError) -> Response:
        return _view(request, session, run, model, refused=error, status=http_status(error.code))

    query = urlencode({"run_id": run_id, "done": "sequence_saved"})
    return await web.act(save, RedirectResponse(f"{PATH}?{query}", status_code=303), refused)
