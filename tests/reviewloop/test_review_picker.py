"""ReviewDispatchViewModel, the shared picker of spec 003: catalog and default resolution, row
operations, serialization and validation. Properties: any stored sequence round-trips; no sequence of
row operations yields an invalid sequence without saying so."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reviewloop.errors import DomainError
from reviewloop.review_dispatch.picker import Draft, PickerContext, ReviewDispatchViewModel
from reviewloop.review_dispatch.selection import ReviewMode, RunnerSpec, validate_sequence

CODEX = RunnerSpec("codex", ("gpt-5", "gpt-5-mini"), ("low", "medium", "high"), "gpt-5", "medium")
SOLO = RunnerSpec("solo", ("m1",), ("std",), "m1", "std", supports_warm=False)
CATALOG = (SOLO, CODEX)


def picker(rows: Any = None, **context: Any) -> ReviewDispatchViewModel:
    return ReviewDispatchViewModel.parse(CATALOG, rows, PickerContext(**context))


def test_defaults_are_named_and_resolved_explicitly() -> None:
    model = picker().add()
    assert model.rows == (Draft("codex", "", "", "cold"),)  # first runner by name, COLD by default
    (view,) = model.views()
    assert view.title == "Row 1 (also the pipeline review)"
    assert [(c.label, c.selected) for c in view.models] == [
        ("runner default (gpt-5)", True),
        ("gpt-5 (default)", False),
        ("gpt-5-mini", False),
    ]
    assert view.efforts[0].label == "runner default (medium)"  # effort beside model, its default said
    assert [c.label for c in view.modes] == ["WARM", "COLD"]
    assert model.to_wire() == [{"runner": "codex", "model": "gpt-5", "effort": "medium", "mode": "cold"}]
    assert picker(default_mode=ReviewMode.WARM).add().rows[0].mode == "warm"


def test_a_runner_without_adjustable_effort_shows_its_default() -> None:
    model = picker([{"runner": "solo", "mode": "cold"}])
    (view,) = model.views()
    assert not view.effort_adjustable
    assert view.effort_note == "solo has no adjustable effort; it runs at std (its default)."
    assert [c.label for c in view.modes] == ["WARM", "COLD"]  # WARM is offered on every row


def test_bad_rows_are_named_per_row_and_dimension_and_never_serialized() -> None:
    model = picker(
        [
            {"runner": "codex", "model": "gpt-5-mini", "effort": "high", "mode": "warm"},
            {"runner": "solo", "model": "gpt-5", "mode": "warm"},
            {"runner": "same", "mode": "hot"},
        ]
    )
    assert model.row_errors(0) == {}
    assert model.row_errors(1) == {
        "model": "solo supports m1",
        "mode": "solo cannot continue a WARM session",
    }
    assert set(model.row_errors(2)) == {"runner", "mode"}
    second = model.views()[1]
    assert second.models[-1].label == "gpt-5 (not offered by solo)" and second.models[-1].selected
    with pytest.raises(DomainError) as refused:
        model.to_wire()
    assert {v.field for v in refused.value.violations} == {
        "/sequence/1/model",
        "/sequence/1/mode",
        "/sequence/2/runner",
        "/sequence/2/mode",
    }
    fixed = model.set(1, "model", "default").set(1, "mode", "cold").remove(2)
    assert fixed.errors() == {}
    assert fixed.request_review() == {
        "action": "request-review",
        "runner": "codex",
        "model": "gpt-5-mini",
        "effort": "high",
        "mode": "warm",
        "sequence": [{"runner": "solo", "model": "m1", "effort": "std", "mode": "cold"}],
    }


def test_operations_refuse_what_they_cannot_do() -> None:
    model = picker([{"runner": "codex", "mode": "cold"}])
    for op in (lambda: model.remove(1), lambda: model.move(0, 1), lambda: model.set(0, "colour", "x")):
        with pytest.raises(DomainError):
            op()
    with pytest.raises(DomainError, match="at most 1"):
        picker(sequence=False).add().add()
    with pytest.raises(DomainError, match="No runner is registered"):
        ReviewDispatchViewModel.of(()).add()
    assert picker().errors() == {"/sequence": "a non-empty array of selections"}  # empty is never valid
    assert picker(
        {"action": "request-review", "runner": "solo", "mode": "cold", "sequence": [{"runner": "codex"}]}
    ).row_errors(1) == {"mode": "required: warm or cold"}


def test_move_puts_a_row_first_and_row_one_selects_the_pipeline_review() -> None:
    model = picker([{"runner": "codex", "mode": "cold"}, {"runner": "solo", "mode": "cold"}]).move(1, 0)
    assert [r["runner"] for r in model.to_wire()] == ["solo", "codex"]
    assert model.views()[0].title == "Row 1 (also the pipeline review)"


# --- properties ---

names = st.sampled_from(["codex", "solo", "nope", "", "same"])
values = st.sampled_from(["", "default", "gpt-5", "gpt-5-mini", "m1", "low", "high", "std", "max"])
modes = st.sampled_from(["warm", "cold", "", "hot"])
drafts = st.builds(Draft, runner=names, model=values, effort=values, mode=modes)
valid_rows = st.one_of(
    st.builds(
        lambda m, e, w: {"runner": "codex", "model": m, "effort": e, "mode": w},
        st.sampled_from(["gpt-5", "gpt-5-mini", "default", ""]),
        st.sampled_from(["low", "medium", "high", ""]),
        st.sampled_from(["warm", "cold"]),
    ),
    st.builds(
        lambda e: {"runner": "solo", "model": "m1", "effort": e, "mode": "cold"}, st.sampled_from(["std", ""])
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(valid_rows, min_size=1, max_size=10))
def test_a_valid_sequence_round_trips_through_both_wire_forms(rows: list[dict[str, str]]) -> None:
    model = picker(rows)
    stored = model.to_wire()
    assert picker(stored).to_wire() == stored  # the stored form is a fixed point
    assert picker(model.request_review()).to_wire() == stored  # so is the request-review payload
    assert stored == [s.to_json() for s in validate_sequence(rows, {r.name: r for r in CATALOG})]


operations = st.one_of(
    st.tuples(st.just("add"), drafts),
    st.tuples(st.just("remove"), st.integers(-1, 11)),
    st.tuples(st.just("move"), st.integers(-1, 11), st.integers(-1, 11)),
    st.tuples(
        st.just("set"), st.integers(-1, 11), st.sampled_from(["runner", "model", "effort", "mode"]), values
    ),
    st.tuples(st.just("set"), st.integers(0, 3), st.just("runner"), names),
    st.tuples(st.just("set"), st.integers(0, 3), st.just("mode"), modes),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(operations, max_size=25))
def test_row_operations_never_make_an_invalid_sequence_silently(ops: list[tuple[Any, ...]]) -> None:
    model = picker()
    catalog = {r.name: r for r in CATALOG}
    for op in ops:
        before = model
        try:
            if op[0] == "add":
                model = model.add(op[1])
            elif op[0] == "remove":
                model = model.remove(op[1])
            elif op[0] == "move":
                model = model.move(op[1], op[2])
            else:
                model = model.set(op[1], op[2], op[3])
        except DomainError as refused:
            assert refused.detail and model is before  # a refused operation changes nothing
        errors = model.errors()
        rows = [row.to_json() for row in model.rows]
        try:
            stored = validate_sequence(rows, catalog)
        except DomainError as invalid:
            # The picker says so, per row and dimension, exactly as the service would; nothing serializes.
            assert errors == {v.field: v.description for v in invalid.violations}
            assert all(error for error in errors.values())
            with pytest.raises(DomainError):
                model.to_wire()
        else:
            assert errors == {} and model.to_wire() == [s.to_json() for s in stored]
            assert all(not view.errors for view in model.views())
