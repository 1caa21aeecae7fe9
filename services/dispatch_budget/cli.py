"""dispatch_budget's CLI subcommands: ``run create``, ``run sequence``, ``review request``,
``review extend-budget``, ``review diff-scope``, ``gate-stats``.

``register(subparsers)`` is called by the ``reviewloop`` command. Every command here is read-only or
goes through the gateway; none writes a receipt (spec 003: no client-written receipts)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any, TextIO

import orjson
from reviewloop.errors import DomainError
from reviewloop.review_dispatch.picker import Draft, PickerContext, ReviewDispatchViewModel
from reviewloop.review_dispatch.selection import RunnerSpec, serialize_request_review, validate_sequence

from dispatch_budget.bootstrap import client_settings
from dispatch_budget.domain.diffscope import INSTRUCTIONS, POLICY, sensitive_candidates
from dispatch_budget.domain.gatestats import render, summarize


def _selection_arguments(parser: Any, *, runner: str, mode: str) -> None:
    """A review selection (runner, model, effort, mode) or a whole sequence, as ``review request`` and
    ``run create`` take them."""
    parser.add_argument("--runner", help=runner)
    parser.add_argument("--model", default="", help="empty or 'default' picks the runner default")
    parser.add_argument("--effort", default="", help="empty or 'default' picks the runner default")
    parser.add_argument("--review-mode", choices=("warm", "cold"), help=mode)
    parser.add_argument("--review-sequence", metavar="JSON", help="the whole ReviewSequence as a JSON array")


def register(subparsers: Any) -> None:
    """The dispatch budget's commands: ``review``, ``run`` and ``gate-stats``."""
    settings = client_settings()
    gateway = "http://127.0.0.1:8080" if settings.gateway is None else settings.gateway
    _review_commands(subparsers, settings.gateway or "", gateway)
    _run_commands(subparsers, gateway)
    stats = subparsers.add_parser("gate-stats", help="summarize a gates.jsonl review-gate decision log")
    stats.add_argument("file", nargs="?", default="-", help="the JSON-lines log (default: stdin)")
    stats.set_defaults(func=cmd_gate_stats)


def _review_commands(subparsers: Any, validating_gateway: str, gateway: str) -> None:
    """``review request`` (validated against ``validating_gateway`` when set), ``diff-scope`` and
    ``extend-budget``."""
    review = subparsers.add_parser("review", help="review requests and the minimal-diff scope (spec 003)")
    review_sub = review.add_subparsers(dest="review_command", required=True)

    request = review_sub.add_parser(
        "request", help="build (and validate) a request-review payload from a selection or a sequence"
    )
    _selection_arguments(
        request,
        runner="a runner from the registered capability catalog",
        mode="WARM continues a lineage; COLD is fresh",
    )
    request.add_argument(
        "--gateway",
        default=validating_gateway,
        help="validate against the catalog at this gateway URL (with REVIEWLOOP_API_KEY)",
    )
    request.set_defaults(func=cmd_review_request)

    scope = review_sub.add_parser("diff-scope", help="print the minimal-diff policy (read-only)")
    scope.add_argument("packet", nargs="?", choices=("packet",))
    scope.add_argument("repository", nargs="?", help="path of the git repository")
    scope.add_argument("base", nargs="?", help="the publication base")
    scope.add_argument("head", nargs="?")
    scope.set_defaults(func=cmd_diff_scope)

    extend = review_sub.add_parser(
        "extend-budget", help="admin: grant a scoped review-round extension (run.extendReviewBudget)"
    )
    extend.add_argument("run_id")
    extend.add_argument("--head", required=True, help="the run's full current head SHA")
    extend.add_argument(
        "--limit", required=True, type=int, help="the new absolute limit (1-5 above the current)"
    )
    extend.add_argument(
        "--scope-brief", required=True, help="the approved scope, sent with reviewer instructions"
    )
    extend.add_argument(
        "--request-id", required=True, help="the idempotency key; a retry returns the receipt"
    )
    extend.add_argument(
        "--expected-limit", type=int, help="compare-and-set: refuse unless this is the current limit"
    )
    extend.add_argument("--gateway", default=gateway)
    extend.set_defaults(func=cmd_extend_budget)


def _run_commands(subparsers: Any, gateway: str) -> None:
    """``run create`` and ``run sequence`` (the shared picker)."""
    run = subparsers.add_parser("run", help="review runs (spec 003)")
    run_sub = run.add_subparsers(dest="run_command", required=True)
    create = run_sub.add_parser(
        "create", help="record a run with its review selection or sequence (validated by the gateway)"
    )
    create.add_argument("run_id")
    create.add_argument("--repository", default="", help="owner/name, with --pr once a PR exists")
    create.add_argument("--pr", type=int, default=0, help="the PR number (0: before a PR exists)")
    create.add_argument("--head", default="", help="the run's full current head SHA")
    _selection_arguments(
        create,
        runner="row 1's runner, from the registered capability catalog",
        mode="the run's review mode (Run.reviewMode)",
    )
    create.add_argument("--gateway", default=gateway)
    create.set_defaults(func=cmd_run_create)

    picker = run_sub.add_parser(
        "sequence",
        help="show or edit a run's review sequence with the shared picker (validated per row)",
        description="Operations apply in the order given; rows are numbered from 1 (row 1 also selects "
        "the pipeline review). Without --save nothing is written.",
    )
    picker.add_argument("run_id")
    picker.add_argument(
        "--add",
        dest="ops",
        action="append",
        type=lambda v: ("add", v),
        metavar="RUNNER[/MODEL[/EFFORT]]:MODE",
        help="append a row; an omitted model or effort is the runner default",
    )
    picker.add_argument(
        "--set", dest="ops", action="append", type=lambda v: ("set", v), metavar="N.DIMENSION=VALUE"
    )
    picker.add_argument("--remove", dest="ops", action="append", type=lambda v: ("remove", v), metavar="N")
    picker.add_argument("--move", dest="ops", action="append", type=lambda v: ("move", v), metavar="N:M")
    picker.add_argument("--save", action="store_true", help="record the sequence on the run (admin key)")
    picker.add_argument("--gateway", default=gateway)
    picker.set_defaults(func=cmd_run_sequence)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _rows(args: argparse.Namespace) -> list[Any]:
    flags = args.runner or args.model or args.effort or args.review_mode
    if args.review_sequence:
        if flags:
            raise ValueError("give either --runner/--model/--effort/--review-mode or --review-sequence")
        rows = orjson.loads(args.review_sequence)
        return rows if isinstance(rows, list) else [rows]
    if not args.runner or not args.review_mode:
        raise ValueError("--runner and --review-mode are required (or --review-sequence)")
    return [{"runner": args.runner, "model": args.model, "effort": args.effort, "mode": args.review_mode}]


def cmd_review_request(args: argparse.Namespace) -> int:
    try:
        rows = _rows(args)
    except orjson.JSONDecodeError:
        return _fail("--review-sequence is not valid JSON")
    except ValueError as exc:
        return _fail(str(exc))
    try:
        if args.gateway:
            payload = _validate_remote(args.gateway, rows)
        else:
            payload = serialize_request_review(validate_sequence(rows, None))  # shape only, offline
    except DomainError as error:
        for violation in error.violations or ():
            print(f"error: {violation.field}: {violation.description}", file=sys.stderr)
        if not error.violations:
            print(f"error: {error.detail}", file=sys.stderr)
        return 2
    sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _validate_remote(gateway: str, rows: list[Any]) -> dict[str, Any]:
    import httpx
    from reviewloop.errors import Code, FieldViolation

    key = client_settings().api_key
    response = httpx.post(
        gateway.rstrip("/") + "/v1/review-rounds/sequences/validate",
        json={"sequence": rows},
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )
    body = response.json()
    if response.status_code != 200:
        violations = tuple(
            FieldViolation(e["field"], e["detail"]) for e in body.get("errors", []) if "field" in e
        )
        raise DomainError(Code.BAD_REQUEST, str(body.get("detail", response.text)), violations=violations)
    result: dict[str, Any] = body["request_review"]
    return result


def cmd_run_create(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """A run with its selection: --runner/--model/--effort/--review-mode make a one-row sequence (row
    1 selects the pipeline review); --review-mode alone sets only Run.reviewMode."""
    import httpx

    out = out or sys.stdout
    body: dict[str, Any] = {"repository": args.repository, "pr_number": args.pr, "head_sha": args.head}
    if args.review_mode:
        body["review_mode"] = args.review_mode
    if args.runner or args.review_sequence:
        try:
            body["review_sequence"] = _rows(args)
        except orjson.JSONDecodeError:
            return _fail("--review-sequence is not valid JSON")
        except ValueError as exc:
            return _fail(str(exc))
        if args.review_sequence:
            body.pop("review_mode", None)  # the rows carry their modes
    headers = {"Authorization": f"Bearer {client_settings().api_key}"}
    with httpx.Client(base_url=args.gateway.rstrip("/"), headers=headers, timeout=10) as client:
        response = client.put(f"/v1/review-rounds/runs/{args.run_id}", json=body)
    if response.status_code != 200:
        problem = response.json()
        for error in problem.get("errors", []):
            print(f"error: {error.get('field', '')}: {error.get('detail', '')}", file=sys.stderr)
        return _fail(str(problem.get("detail", response.text)))
    out.write(orjson.dumps(response.json(), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _row_number(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"{text!r} is not a row number (rows count from 1)")
    return int(text) - 1


def _picker_op(model: ReviewDispatchViewModel, op: str, value: str) -> ReviewDispatchViewModel:
    """One command-line operation on the picker; the view-model owns the rows and their rules."""
    if op == "add":
        selected, colon, mode = value.rpartition(":")
        if not colon:  # no mode given: the row says it is missing, it is never implied
            selected, mode = value, ""
        runner, model_name, effort = ([*selected.split("/", 2), "", ""])[:3]
        return model.add(Draft(runner, model_name, effort, mode))
    if op == "set":
        where, _, picked = value.partition("=")
        row, _, dimension = where.partition(".")
        return model.set(_row_number(row), dimension, picked)
    if op == "remove":
        return model.remove(_row_number(value))
    start, _, to = value.partition(":")
    return model.move(_row_number(start), _row_number(to))


def render_sequence(model: ReviewDispatchViewModel) -> str:
    """The picker's rows as text: runner, model with effort beside it, WARM/COLD, and each row's
    problems under it."""
    if not model.rows:
        return "  (no rows: the project review configuration decides)\n"
    lines = []
    for view in model.views():
        shown = {
            name: next((c.label for c in choices if c.selected), "")
            for name, choices in (("model", view.models), ("effort", view.efforts), ("mode", view.modes))
        }
        lines.append(
            f"  {view.number}. {view.draft.runner or '(no runner)'}  model {shown['model']}  "
            f"effort {shown['effort']}  {shown['mode'] or '(no mode)'}"
            + ("  [also the pipeline review]" if view.number == 1 else "")
        )
        if view.effort_note:
            lines.append(f"     {view.effort_note}")
        lines += [f"     error: {dimension}: {message}" for dimension, message in view.errors.items()]
    lines += [f"  error: {m}" for p, m in model.errors().items() if p == "/sequence"]
    return "\n".join(lines) + "\n"


def cmd_run_sequence(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The run's sequence in the shared picker: read it and the runner catalog from the gateway, apply
    the operations, show every row (and what is wrong with it), and with --save record it."""
    import httpx

    out = out or sys.stdout
    headers = {"Authorization": f"Bearer {client_settings().api_key}"}
    with httpx.Client(base_url=args.gateway.rstrip("/"), headers=headers, timeout=10) as client:
        run = client.get(f"/v1/review-rounds/runs/{args.run_id}")
        runners = client.get("/v1/review-rounds/runners")
        for response in (run, runners):
            if response.status_code != 200:
                return _fail(str(response.json().get("detail", response.text)))
        catalog = [RunnerSpec.from_json(r) for r in runners.json()["runners"]]
        model = ReviewDispatchViewModel.parse(
            catalog, run.json().get("review_sequence"), PickerContext.for_run(run.json())
        )
        try:
            for op, value in args.ops or ():
                model = _picker_op(model, op, value)
        except (DomainError, ValueError) as exc:
            return _fail(exc.detail if isinstance(exc, DomainError) else str(exc))
        out.write(f"Run {args.run_id}: review sequence\n{render_sequence(model)}")
        if model.errors() and (args.ops or args.save):  # showing a run without rows is no mistake
            return _fail("the sequence has problems (above); nothing was saved")
        if not args.save:
            return 0
        saved = client.put(f"/v1/review-rounds/runs/{args.run_id}", json={"review_sequence": model.to_wire()})
    if saved.status_code != 200:
        return _fail(str(saved.json().get("detail", saved.text)))
    out.write(f"saved: {len(model.rows)} row(s)\n")
    return 0


def cmd_extend_budget(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Without --expected-limit the current limit is read first, so the grant is still a
    compare-and-set against what this command saw."""
    import httpx

    out = out or sys.stdout
    headers = {"Authorization": f"Bearer {client_settings().api_key}"}
    base = args.gateway.rstrip("/")
    with httpx.Client(base_url=base, headers=headers, timeout=10) as client:
        expected = args.expected_limit
        if expected is None:
            budget = client.get("/v1/review-rounds/budget", params={"run_id": args.run_id})
            if budget.status_code != 200:
                return _fail(str(budget.json().get("detail", budget.text)))
            current = budget.json()
            granted = current.get("extension", {})
            # A retry of this very grant names the limit it saw the first time, so it stays exact.
            expected = (
                granted["prior_limit"] if granted.get("request_id") == args.request_id else current["limit"]
            )
        response = client.post(
            f"/v1/runs/{args.run_id}/extend-review-budget",
            json={
                "head_sha": args.head,
                "limit": args.limit,
                "expected_limit": expected,
                "scope_brief": args.scope_brief,
            },
            headers={"Idempotency-Key": args.request_id},
        )
    if response.status_code != 201:
        return _fail(str(response.json().get("detail", response.text)))
    receipt = response.json()
    out.write(orjson.dumps(receipt, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _git(repository: str, *argv: str) -> str:
    return subprocess.run(["git", "-C", repository, *argv], check=True, capture_output=True, text=True).stdout


def cmd_diff_scope(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if not args.packet:
        out.write(POLICY + "\n\n" + INSTRUCTIONS + "\n")
        return 0
    if not (args.repository and args.base and args.head):
        return _fail("usage: reviewloop review diff-scope packet <repository> <base> <head>")
    if not Path(args.repository).is_dir():
        return _fail(f"{args.repository} is not a directory")
    try:
        base = _git(args.repository, "rev-parse", "--verify", f"{args.base}^{{commit}}").strip()
        head = _git(args.repository, "rev-parse", "--verify", f"{args.head}^{{commit}}").strip()
        changed = [
            p for p in _git(args.repository, "diff", "--name-only", f"{base}...{head}").splitlines() if p
        ]
    except subprocess.CalledProcessError as exc:
        return _fail(f"git: {(exc.stderr or '').strip() or exc}")
    out.write(POLICY + "\n\n")
    out.write(f"Packet: {args.repository} {base}..{head}\n\nChanged paths ({len(changed)}):\n")
    out.writelines(f"  {path}\n" for path in changed)
    candidates = sensitive_candidates(changed)
    out.write(f"\nSensitive-path candidates ({len(candidates)}), review against the frozen ticket:\n")
    out.writelines(f"  {path}  [{pattern}]\n" for path, pattern in candidates)
    return 0


def cmd_gate_stats(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except OSError as exc:
        return _fail(str(exc))
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            print(f"warning: line {number} is not JSON; skipped", file=sys.stderr)
            continue
        if isinstance(record, dict):
            records.append(record)
    if not records:
        return _fail("no decision records")
    out.write(render(summarize(records)) + "\n")
    return 0
