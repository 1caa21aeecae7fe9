"""Review selection, sequences and mode resolution (spec 003's shared review-dispatch package).

Spec 003 "Selection and sequence", "Mode resolution", "Public surface": one serializer and one
validator, shared by dispatch_budget (the backend), the gateway's console, the CLI and every caller.
Pure: it imports only the error model, so a domain may use it as it uses ``reviewloop.errors``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from reviewloop.errors import Code, DomainError, FieldViolation

MAX_SEQUENCE_ROWS = 10
SELECTION_KEYS = ("runner", "model", "effort", "mode")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,79}$")
# Runner-relative sentinels the spec removed: nothing may depend on the worker's own runner.
SENTINELS = frozenset({"same", "same-as-worker", "worker", "self", "*"})


class ReviewMode(StrEnum):
    """WARM continues a review lineage's session; COLD starts a fresh one."""

    WARM = "warm"
    COLD = "cold"


@dataclass(frozen=True)
class RunnerSpec:
    """A catalog entry: what a runner supports. Its defaults are what an empty model/effort picks."""

    name: str
    models: tuple[str, ...]
    efforts: tuple[str, ...]
    default_model: str
    default_effort: str
    supports_warm: bool = True
    supports_model_change: bool = False

    def to_json(self) -> dict[str, Any]:
        """The catalog entry as stored and sent."""
        return {
            "name": self.name,
            "models": list(self.models),
            "efforts": list(self.efforts),
            "default_model": self.default_model,
            "default_effort": self.default_effort,
            "supports_warm": self.supports_warm,
            "supports_model_change": self.supports_model_change,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunnerSpec:
        """The entry ``to_json`` wrote."""
        return cls(
            name=data["name"],
            models=tuple(data["models"]),
            efforts=tuple(data["efforts"]),
            default_model=data["default_model"],
            default_effort=data["default_effort"],
            supports_warm=bool(data.get("supports_warm", True)),
            supports_model_change=bool(data.get("supports_model_change", False)),
        )


def validate_runner(spec: RunnerSpec) -> RunnerSpec:
    """``spec`` when it is a well-formed catalog entry; else DomainError naming each field."""
    problems: list[FieldViolation] = []
    if not NAME.match(spec.name) or spec.name.lower() in SENTINELS:
        problems.append(FieldViolation("/name", "a runner name (letters, digits, . _ : / -), not a sentinel"))
    for field, values in (("/models", spec.models), ("/efforts", spec.efforts)):
        if not values or len(values) > 50 or not all(NAME.match(v) for v in values):
            problems.append(FieldViolation(field, "one to 50 names"))
        elif len(set(values)) != len(values):
            problems.append(FieldViolation(field, "names must be distinct"))
    if spec.default_model not in spec.models:
        problems.append(FieldViolation("/default_model", "must be one of models"))
    if spec.default_effort not in spec.efforts:
        problems.append(FieldViolation("/default_effort", "must be one of efforts"))
    _raise(problems)
    return spec


@dataclass(frozen=True)
class ReviewSelection:
    """Exactly four dimensions; model and effort are always explicit once validated."""

    runner: str
    model: str
    effort: str
    mode: ReviewMode

    def to_json(self) -> dict[str, str]:
        """The stored and wire form of one row."""
        return {"runner": self.runner, "model": self.model, "effort": self.effort, "mode": self.mode.value}


def _raise(problems: list[FieldViolation]) -> None:
    if problems:
        detail = "; ".join(f"{p.field}: {p.description}" for p in problems)
        raise DomainError(Code.BAD_REQUEST, detail, violations=tuple(problems))


def _row_problems(
    row: Any, pointer: str, catalog: Mapping[str, RunnerSpec] | None
) -> tuple[ReviewSelection | None, list[FieldViolation]]:
    if not isinstance(row, Mapping):
        return None, [FieldViolation(pointer, "a selection is an object {runner, model, effort, mode}")]
    problems = [
        FieldViolation(
            f"{pointer}/{key}", "not a selection dimension; a selection is runner, model, effort, mode"
        )
        for key in row
        if key not in SELECTION_KEYS
    ]
    runner, model, effort, mode = (row.get(k, "") for k in SELECTION_KEYS)
    if not all(isinstance(v, str) for v in (runner, model, effort, mode)):
        return None, [*problems, FieldViolation(pointer, "every dimension is a string")]
    spec = None
    if not runner:
        problems.append(FieldViolation(f"{pointer}/runner", "required"))
    elif runner.lower() in SENTINELS:
        problems.append(
            FieldViolation(
                f"{pointer}/runner", "runner-relative sentinels are removed; name a registered runner"
            )
        )
    elif catalog is not None:
        spec = catalog.get(runner)
        if spec is None:
            known = ", ".join(sorted(catalog)) or "none registered"
            problems.append(FieldViolation(f"{pointer}/runner", f"not in the runner catalog ({known})"))
    elif not NAME.match(runner):
        problems.append(FieldViolation(f"{pointer}/runner", "not a runner name"))
    if mode not in (ReviewMode.WARM.value, ReviewMode.COLD.value):
        problems.append(FieldViolation(f"{pointer}/mode", "required: warm or cold"))
    if spec is not None:
        if model in ("", "default"):
            model = spec.default_model
        elif model not in spec.models:
            problems.append(FieldViolation(f"{pointer}/model", f"{runner} supports {', '.join(spec.models)}"))
        if effort in ("", "default"):
            effort = spec.default_effort
        elif effort not in spec.efforts:
            problems.append(
                FieldViolation(f"{pointer}/effort", f"{runner} supports {', '.join(spec.efforts)}")
            )
        if mode == ReviewMode.WARM.value and not spec.supports_warm:
            problems.append(FieldViolation(f"{pointer}/mode", f"{runner} cannot continue a WARM session"))
    if catalog is None:  # offline: the runner default stays an explicit choice the gateway resolves
        model, effort = model or "default", effort or "default"
    if problems:
        return None, problems
    return ReviewSelection(runner, model, effort, ReviewMode(mode)), []


def validate_selection(
    row: Any, catalog: Mapping[str, RunnerSpec] | None, pointer: str = "/selection"
) -> ReviewSelection:
    """A selection against the catalog (``None``: shape only, for offline callers like the CLI)."""
    selection, problems = _row_problems(row, pointer, catalog)
    _raise(problems)
    assert selection is not None
    return selection


def validate_sequence(rows: Any, catalog: Mapping[str, RunnerSpec] | None) -> list[ReviewSelection]:
    """Every row validated; all problems reported at once, each naming its row."""
    if not isinstance(rows, list) or not rows:
        raise DomainError(
            Code.BAD_REQUEST,
            "/sequence: a ReviewSequence is a non-empty array of selections",
            violations=(FieldViolation("/sequence", "a non-empty array of selections"),),
        )
    if len(rows) > MAX_SEQUENCE_ROWS:
        raise DomainError(
            Code.BAD_REQUEST,
            f"/sequence: at most {MAX_SEQUENCE_ROWS} rows",
            violations=(FieldViolation("/sequence", f"at most {MAX_SEQUENCE_ROWS} rows"),),
        )
    result: list[ReviewSelection] = []
    problems: list[FieldViolation] = []
    for index, row in enumerate(rows):
        selection, row_problems = _row_problems(row, f"/sequence/{index}", catalog)
        problems += row_problems
        if selection is not None:
            result.append(selection)
    _raise(problems)
    return result


def serialize_request_review(rows: Sequence[ReviewSelection]) -> dict[str, Any]:
    """The one serializer: row 1 is the request-review action payload, the rest its ``sequence``."""
    payload: dict[str, Any] = {"action": "request-review", **rows[0].to_json()}
    if len(rows) > 1:
        payload["sequence"] = [row.to_json() for row in rows[1:]]
    return payload


def deserialize_request_review(payload: Mapping[str, Any]) -> list[Any]:
    """The rows of a request-review payload, for validation (the inverse of the serializer)."""
    first = {k: payload[k] for k in SELECTION_KEYS if k in payload}
    rest = payload.get("sequence", [])
    return [first, *(rest if isinstance(rest, list) else [rest])]


# --- mode resolution ---

PRECEDENCE = ("explicit", "run", "pr_work", "repeat_context", "project")


def resolve_review_mode(
    explicit: ReviewMode | None = None,
    run: ReviewMode | None = None,
    pr_work: ReviewMode | None = None,
    repeat_context: ReviewMode | None = None,
    project_default: ReviewMode | None = None,
) -> tuple[ReviewMode, str]:
    """ResolveReviewMode: the first set rung wins, else COLD.

    It neither verifies lineage nor authorizes session reuse: an unavailable WARM is refused later,
    never downgraded here.
    """
    for source, mode in zip(
        PRECEDENCE, (explicit, run, pr_work, repeat_context, project_default), strict=True
    ):
        if mode is not None:
            return mode, source
    return ReviewMode.COLD, "default"


# Removed configuration keys and how to convert them (spec 003 "Public surface").
REMOVED_KEYS: Mapping[str, str] = {
    "minimum_independent_reviews": "list the reviews you require as review.sequence rows",
    "require_cross_runner": "runner diversity proves nothing; name each row's runner in review.sequence",
    "self_review.session_policy": "set review.mode to warm or cold",
}


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        flat[path] = value
        if isinstance(value, Mapping):
            flat.update(_flatten(value, path + "."))
    return flat


def required_reviews(config: Mapping[str, Any]) -> int:
    """How many qualifying reviews publication requires.

    One per ``review.sequence`` row (the conversion of the removed minimum_independent_reviews), at
    least one.
    """
    section = config.get("review", config) if isinstance(config.get("review"), Mapping) else config
    sequence = section.get("sequence")
    return max(1, len(sequence)) if isinstance(sequence, list) else 1


def configured_rows(config: Mapping[str, Any]) -> list[dict[str, str]]:
    """The project configuration's ``review.sequence`` rows the gate attributes reviews to.

    Each as far as it names its dimensions; none when it names no valid rows (the gate then counts
    free slots).
    """
    section = config.get("review", config) if isinstance(config.get("review"), Mapping) else config
    sequence = section.get("sequence")
    if not isinstance(sequence, list):
        return []
    rows: list[dict[str, str]] = []
    for row in sequence[:MAX_SEQUENCE_ROWS]:
        if not isinstance(row, Mapping) or not isinstance(row.get("runner"), str):
            return []
        rows.append({k: str(row.get(k) or "") for k in SELECTION_KEYS})
    return rows


def project_default_mode(config: Mapping[str, Any]) -> ReviewMode | None:
    """The project review configuration's ``mode`` default.

    Removed keys are refused with a conversion hint, never ignored into a looser default. Accepts
    ``{review: {...}}`` or the review section itself.
    """
    section = config.get("review", config) if isinstance(config.get("review"), Mapping) else config
    flat = _flatten(section)
    problems = [
        FieldViolation(f"/review/{path.replace('.', '/')}", f"removed; {hint}")
        for path, hint in REMOVED_KEYS.items()
        if path in flat
    ]
    mode = section.get("mode")
    if mode is not None and mode not in (ReviewMode.WARM.value, ReviewMode.COLD.value):
        problems.append(FieldViolation("/review/mode", "warm or cold"))
    _raise(problems)
    return ReviewMode(mode) if mode is not None else None
