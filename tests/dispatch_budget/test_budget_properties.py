"""Property tests of the round-budget arithmetic (pure domain): any interleaving of admissions,
settlements, late verdicts and grants keeps the spec's invariants."""

from __future__ import annotations

from dispatch_budget.domain.budget import (
    AUTOMATIC,
    MAX_EXTENSION_STEP,
    ExtensionInput,
    ReviewRoundBudget,
    Trigger,
    check_admission,
    check_extension_limits,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from reviewloop.errors import Code, DomainError

ops = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), st.sampled_from(list(Trigger))),
        st.tuples(st.just("no_verdict"), st.integers(0, 20)),
        st.tuples(st.just("late_verdict"), st.integers(0, 20)),
        st.tuples(st.just("grant"), st.integers(-2, 8)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_used_rounds_never_pass_the_limit_and_refusals_follow_the_rules(
    steps: list[tuple[str, object]],
) -> None:
    outcomes: list[str | None] = []  # per admission: None (unsettled) | counted | no_verdict
    limit = 5
    for op, arg in steps:
        budget = ReviewRoundBudget(len(outcomes), outcomes.count("no_verdict"), limit)
        if op == "admit":
            assert isinstance(arg, Trigger)
            try:
                check_admission(budget, arg, [])
                outcomes.append(None)
            except DomainError as error:
                assert error.code is Code.QUOTA_EXCEEDED
                assert budget.exhausted or (budget.no_verdict_capped and arg in AUTOMATIC)
                assert f"{budget.used}/{limit}" in error.detail or budget.no_verdict_capped
            else:
                assert not budget.exhausted
        elif op == "no_verdict" and isinstance(arg, int) and arg < len(outcomes) and outcomes[arg] is None:
            outcomes[arg] = "no_verdict"
        elif op == "late_verdict" and isinstance(arg, int) and arg < len(outcomes):
            outcomes[arg] = "counted"  # a late verdict clears the settlement; the attempt counts
        elif op == "grant" and isinstance(arg, int):
            request = ExtensionInput("a" * 40, limit + arg, limit, "brief", "k")
            try:
                check_extension_limits(request, limit)
                limit += arg
            except DomainError:
                assert not 1 <= arg <= MAX_EXTENSION_STEP
        after = ReviewRoundBudget(len(outcomes), outcomes.count("no_verdict"), limit)
        # A late verdict may lift used above a limit only by recounting an already-admitted attempt.
        assert after.used <= max(limit, len([o for o in outcomes if o != "no_verdict"]))
        assert after.used == len(outcomes) - outcomes.count("no_verdict") >= 0
        assert after.label.startswith(f"{after.used}/{limit}")
        assert ("no-verdict" in after.label) == (after.no_verdict > 0)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 50), st.integers(-100, 100))
def test_a_grant_raises_the_limit_by_one_to_five_only(current: int, new: int) -> None:
    request = ExtensionInput("a" * 40, new, current, "brief", "k")
    try:
        check_extension_limits(request, current)
    except DomainError as error:
        assert error.code is Code.BAD_REQUEST and not current + 1 <= new <= current + 5
    else:
        assert current + 1 <= new <= current + 5
