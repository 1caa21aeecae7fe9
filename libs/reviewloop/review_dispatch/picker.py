"""ReviewDispatchViewModel: the shared review picker of spec 003 ("Shared picker").

One view-model owns the picker's state, catalog and default resolution, row operations,
serialization and validation; each renderer (the console's sequence page, the CLI's ``run
sequence``) only draws what it answers and turns its own input into these operations. Validation is
``selection.validate_sequence``, the backend's own, so a renderer can never accept a row the service
refuses. Pure and immutable: every operation answers a new view-model.

Rows are drafts: what the user has picked so far, which may be wrong. A draft's empty model or effort
selects the runner default explicitly (and is shown with the default it resolves to). Wrong rows are
never dropped or quietly changed: ``errors`` names them, and ``to_wire`` refuses until they are fixed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from reviewloop.errors import Code, DomainError, FieldViolation
from reviewloop.review_dispatch.selection import (
    MAX_SEQUENCE_ROWS,
    SELECTION_KEYS,
    ReviewMode,
    ReviewSelection,
    RunnerSpec,
    deserialize_request_review,
    resolve_review_mode,
    serialize_request_review,
    validate_sequence,
)

DEFAULT = ""  # a draft's model or effort left at the runner default
MODES = (ReviewMode.WARM, ReviewMode.COLD)  # every row offers both, whatever its runner supports


@dataclass(frozen=True)
class Draft:
    """One row as picked so far: any dimension may still be wrong or missing."""

    runner: str = ""
    model: str = DEFAULT
    effort: str = DEFAULT
    mode: str = ""

    def to_json(self) -> dict[str, str]:
        """The row as typed, in the wire's four keys (what the validator reads)."""
        return {"runner": self.runner, "model": self.model, "effort": self.effort, "mode": self.mode}

    @classmethod
    def from_json(cls, row: Any) -> Draft:
        """A stored or typed row; a missing dimension stays empty (and ``errors`` says so)."""
        if not isinstance(row, Mapping):
            return cls()
        values = {k: row.get(k) for k in SELECTION_KEYS}
        model, effort = (str(values[k]) if isinstance(values[k], str) else "" for k in ("model", "effort"))
        return cls(
            runner=values["runner"] if isinstance(values["runner"], str) else "",
            model=DEFAULT if model == "default" else model,
            effort=DEFAULT if effort == "default" else effort,
            mode=values["mode"] if isinstance(values["mode"], str) else "",
        )


@dataclass(frozen=True)
class Choice:
    """One option a renderer offers: its value, what it says, and whether the row has it."""

    value: str
    label: str
    selected: bool = False


@dataclass(frozen=True)
class RowView:
    """What a renderer draws for one row: effort beside model, WARM/COLD always."""

    number: int  # 1-based, as a reader counts
    title: str
    draft: Draft
    runners: tuple[Choice, ...]
    models: tuple[Choice, ...]
    efforts: tuple[Choice, ...]
    modes: tuple[Choice, ...]
    effort_adjustable: bool
    effort_note: str  # says the default a runner without adjustable effort runs at
    errors: Mapping[str, str]  # dimension (or "row") -> what is wrong with it


@dataclass(frozen=True)
class PickerContext:
    """What the call site supplies: allowed rows, defaults, sequence availability (spec 003).

    ``default_mode`` is what a new row starts with (the caller resolves it with
    ``resolve_review_mode``); ``sequence`` False allows one row only (a single selection).
    """

    default_mode: ReviewMode = ReviewMode.COLD
    sequence: bool = True
    max_rows: int = MAX_SEQUENCE_ROWS

    @classmethod
    def for_run(cls, run: Mapping[str, Any]) -> PickerContext:
        """The context of a run's sequence (a ``ReviewRun`` as the API answers it).

        A new row starts in the mode the run's own rungs resolve to, else COLD.
        """
        rungs = (run.get(k) for k in ("review_mode", "pr_work_review_mode", "repeat_review_context_mode"))
        run_mode, pr_work, repeat = (ReviewMode(m) if m in ("warm", "cold") else None for m in rungs)
        mode, _ = resolve_review_mode(run=run_mode, pr_work=pr_work, repeat_context=repeat)
        return cls(default_mode=mode)

    @property
    def row_limit(self) -> int:
        """How many rows the caller allows."""
        return min(self.max_rows, MAX_SEQUENCE_ROWS) if self.sequence else 1


def _refuse(detail: str, pointer: str = "/sequence") -> DomainError:
    return DomainError(Code.BAD_REQUEST, detail, violations=(FieldViolation(pointer, detail),))


@dataclass(frozen=True)
class ReviewDispatchViewModel:
    """The picker's whole state: the runner catalog, the draft rows and the call context."""

    catalog: Mapping[str, RunnerSpec]
    rows: tuple[Draft, ...] = ()
    context: PickerContext = field(default_factory=PickerContext)

    # --- construction and serialization ---

    @classmethod
    def of(
        cls,
        catalog: Iterable[RunnerSpec] | Mapping[str, RunnerSpec],
        rows: Iterable[Draft] = (),
        context: PickerContext | None = None,
    ) -> ReviewDispatchViewModel:
        """A picker over ``catalog`` (runners are offered by name) with ``rows``."""
        specs = catalog.values() if isinstance(catalog, Mapping) else catalog
        ordered = {spec.name: spec for spec in sorted(specs, key=lambda s: s.name)}
        return cls(ordered, tuple(rows), context or PickerContext())

    @classmethod
    def parse(
        cls,
        catalog: Iterable[RunnerSpec] | Mapping[str, RunnerSpec],
        wire: Any,
        context: PickerContext | None = None,
    ) -> ReviewDispatchViewModel:
        """The picker for a stored sequence or a request-review payload.

        A stored sequence is a list of rows; a payload is row 1 with the rest in ``sequence``;
        ``None`` is no rows. Wrong rows are kept, and named by ``errors``.
        """
        if wire is None:
            rows: list[Any] = []
        elif isinstance(wire, Mapping):
            rows = deserialize_request_review(wire)
        elif isinstance(wire, list):
            rows = wire
        else:
            raise _refuse("a review sequence is a list of rows or a request-review payload")
        return cls.of(catalog, (Draft.from_json(row) for row in rows), context)

    def selections(self) -> list[ReviewSelection]:
        """The rows, validated against the catalog with the runner defaults resolved.

        Raises:
            DomainError: naming every wrong row (``/sequence/<index>/<dimension>``).
        """
        if len(self.rows) > self.context.row_limit:
            raise _refuse(f"this picker takes at most {self.context.row_limit} row(s)")
        return validate_sequence([row.to_json() for row in self.rows], self.catalog)

    def to_wire(self) -> list[dict[str, str]]:
        """The stored form (a run's ``review_sequence``): every row explicit, defaults resolved."""
        return [selection.to_json() for selection in self.selections()]

    def request_review(self) -> dict[str, Any]:
        """The shared request-review payload: row 1, the rest in its ``sequence``."""
        return serialize_request_review(self.selections())

    # --- validation ---

    def errors(self) -> dict[str, str]:
        """Every problem, by JSON pointer (``/sequence`` or ``/sequence/<index>/<dimension>``).

        Empty exactly when ``to_wire`` succeeds.
        """
        try:
            self.selections()
        except DomainError as error:
            return {v.field: v.description for v in error.violations} or {"/sequence": error.detail}
        return {}

    def row_errors(self, index: int) -> dict[str, str]:
        """Row ``index``'s problems by dimension ("row" for the row as a whole)."""
        prefix = f"/sequence/{index}"
        found: dict[str, str] = {}
        for pointer, message in self.errors().items():
            if pointer == prefix:
                found["row"] = message
            elif pointer.startswith(prefix + "/"):
                found[pointer.removeprefix(prefix + "/")] = message
        return found

    # --- row operations ---

    def new_row(self) -> Draft:
        """What an added row starts as: the first runner, its defaults, the context's default mode."""
        if not self.catalog:
            raise DomainError(
                Code.NOT_CONFIGURED, "No runner is registered; an admin registers one before rows are added."
            )
        return Draft(next(iter(self.catalog)), DEFAULT, DEFAULT, self.context.default_mode.value)

    def add(self, draft: Draft | None = None) -> ReviewDispatchViewModel:
        """A row appended (``draft``, or ``new_row``); refused past the caller's row limit."""
        if len(self.rows) >= self.context.row_limit:
            raise _refuse(f"this picker takes at most {self.context.row_limit} row(s)")
        return replace(self, rows=(*self.rows, draft if draft is not None else self.new_row()))

    def remove(self, index: int) -> ReviewDispatchViewModel:
        """Row ``index`` (0-based) removed."""
        self._check(index)
        return replace(self, rows=self.rows[:index] + self.rows[index + 1 :])

    def move(self, index: int, to: int) -> ReviewDispatchViewModel:
        """Row ``index`` moved to position ``to`` (both 0-based); row 1 selects the pipeline review."""
        self._check(index)
        self._check(to)
        rows = list(self.rows)
        rows.insert(to, rows.pop(index))
        return replace(self, rows=tuple(rows))

    def set(self, index: int, dimension: str, value: str) -> ReviewDispatchViewModel:
        """One dimension of row ``index`` picked.

        The other dimensions stay as picked: a model the new runner lacks is named by ``errors``, never
        swapped for another silently.
        """
        self._check(index)
        if dimension not in SELECTION_KEYS:
            raise _refuse(
                f"{dimension!r} is not a selection dimension (runner, model, effort, mode)",
                f"/sequence/{index}",
            )
        if dimension in ("model", "effort") and value == "default":
            value = DEFAULT
        return replace(
            self,
            rows=tuple(
                replace(row, **{dimension: value}) if i == index else row for i, row in enumerate(self.rows)
            ),
        )

    def _check(self, index: int) -> None:
        if not 0 <= index < len(self.rows):
            raise _refuse(f"there is no row {index + 1}; the sequence has {len(self.rows)}")

    # --- what a renderer draws ---

    def views(self) -> tuple[RowView, ...]:
        """Each row as a renderer draws it, with its choices and its problems."""
        problems = self.errors()
        return tuple(self._view(i, row, problems) for i, row in enumerate(self.rows))

    def _view(self, index: int, row: Draft, problems: Mapping[str, str]) -> RowView:
        prefix = f"/sequence/{index}"
        errors = {
            ("row" if p == prefix else p.removeprefix(prefix + "/")): m
            for p, m in problems.items()
            if p == prefix or p.startswith(prefix + "/")
        }
        spec = self.catalog.get(row.runner)
        runners = [Choice(name, name, name == row.runner) for name in self.catalog]
        if spec is None and row.runner:
            runners.append(Choice(row.runner, f"{row.runner} (not registered)", True))
        title = f"Row {index + 1}" + (" (also the pipeline review)" if index == 0 else "")
        return RowView(
            number=index + 1,
            title=title,
            draft=row,
            runners=tuple(runners),
            models=_choices(row.model, spec.models if spec else (), spec.default_model if spec else "", spec),
            efforts=_choices(
                row.effort, spec.efforts if spec else (), spec.default_effort if spec else "", spec
            ),
            modes=tuple(Choice(m.value, m.value.upper(), m.value == row.mode) for m in MODES),
            effort_adjustable=spec is None or len(spec.efforts) > 1,
            effort_note=effort_note(spec),
            errors=errors,
        )


def effort_note(spec: RunnerSpec | None) -> str:
    """For a runner whose effort is not adjustable: the supported default, said explicitly."""
    if spec is None or len(spec.efforts) > 1:
        return ""
    return f"{spec.name} has no adjustable effort; it runs at {spec.default_effort} (its default)."


def _choices(
    current: str, supported: Sequence[str], default: str, spec: RunnerSpec | None
) -> tuple[Choice, ...]:
    """The runner default first (naming what it resolves to), then what the runner supports.

    A picked value the runner lacks stays, marked, so the row shows what was picked and its error.
    """
    label = f"runner default ({default})" if default else "runner default"
    choices = [Choice(DEFAULT, label, current == DEFAULT)]
    choices += [Choice(v, v + (" (default)" if v == default else ""), v == current) for v in supported]
    if current and current not in supported:
        lacking = f"not offered by {spec.name}" if spec is not None else "unknown"
        choices.append(Choice(current, f"{current} ({lacking})", True))
    return tuple(choices)
