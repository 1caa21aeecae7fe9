"""The risk dial's what-if (issue 38), as a pure function over a category's last drafts: every draft is
counted once, a stricter dial never auto-sends more, and the replay is the real gate's."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta

from hypothesis import given
from hypothesis import strategies as st
from review_state.domain.dial_effect import DAILY_CAP, PastDraft, effect, record
from review_state.domain.submission import Dial, breaker

DAY = date(2026, 12, 1)

drafts = st.lists(
    st.builds(
        PastDraft,
        review_id=st.from_regex(r"rr_[0-9a-z]{8}", fullmatch=True),
        confidence=st.one_of(st.none(), st.floats(0, 1)),
        first_contact=st.booleans(),
        day=st.integers(0, 3).map(lambda n: DAY + timedelta(days=n)),
        decision=st.sampled_from(["", "approve", "edit", "reject"]),
    ),
    max_size=60,
)
dials = st.builds(
    Dial,
    min_confidence=st.floats(0, 1),
    first_contact_gate=st.booleans(),
    canary_rate=st.floats(0, 1),
    auto_send_cap_per_day=st.integers(0, 30),
)


@given(drafts, dials)
def test_every_draft_is_auto_sent_or_held_once(past: list[PastDraft], dial: Dial) -> None:
    found = effect(past, dial)
    assert found.considered == len(past)
    assert found.auto_sent + sum(found.held.values()) == len(past)
    assert all(n > 0 for n in found.held.values())


@given(drafts, dials, st.floats(0, 1), st.booleans(), st.floats(0, 1), st.integers(0, 30))
def test_a_stricter_dial_never_auto_sends_more(
    past: list[PastDraft], dial: Dial, confidence: float, gate: bool, canary: float, cap: int
) -> None:
    stricter = replace(
        dial,
        min_confidence=max(dial.min_confidence, confidence),
        first_contact_gate=dial.first_contact_gate or gate,
        canary_rate=max(dial.canary_rate, canary),
        auto_send_cap_per_day=min(dial.auto_send_cap_per_day, cap),
    )
    assert effect(past, stricter).auto_sent <= effect(past, dial).auto_sent


@given(drafts, dials)
def test_the_daily_cap_bounds_each_day_and_the_rest_is_the_real_breaker(
    past: list[PastDraft], dial: Dial
) -> None:
    uncapped = replace(dial, auto_send_cap_per_day=10**6)
    passing = [
        d
        for d in past
        if breaker(dial=dial, confidence=d.confidence, first_contact=d.first_contact, review_id=d.review_id)
        is None
    ]
    assert effect(past, uncapped).auto_sent == len(passing)
    per_day = {d.day: sum(1 for p in passing if p.day == d.day) for d in passing}
    capped = effect(past, dial)
    assert capped.auto_sent == sum(min(n, dial.auto_send_cap_per_day) for n in per_day.values())
    assert capped.held.get(DAILY_CAP, 0) == len(passing) - capped.auto_sent


def test_a_proposed_threshold_moves_the_drafts_between_its_old_and_new_value() -> None:
    dial = Dial(min_confidence=0.7, first_contact_gate=False, canary_rate=0, auto_send_cap_per_day=100)
    past = [PastDraft(f"rr_{n:08d}", n / 10, False, DAY) for n in range(10)]  # 0.0 .. 0.9
    assert effect(past, dial).auto_sent == 3
    assert effect(past, replace(dial, min_confidence=0.5)).auto_sent == 5
    assert effect(past, replace(dial, min_confidence=0.5)).held == {"low_confidence": 5}
    gated = replace(dial, first_contact_gate=True)
    assert effect([replace(p, first_contact=True) for p in past], gated).held == {
        "first_contact": 3,
        "low_confidence": 7,
    }


@given(st.lists(st.sampled_from(["", "approve", "edit", "reject"]), max_size=50))
def test_the_record_counts_the_newest_clean_approvals_in_a_row(decisions: list[str]) -> None:
    found = record(decisions)
    decided = [d for d in decisions if d]
    assert found.decided == len(decided)
    assert found.clean_streak <= found.decided
    assert decided[: found.clean_streak] == ["approve"] * found.clean_streak
    assert found.clean_streak == len(decided) or decided[found.clean_streak] != "approve"
    assert found.edit_rate == (decided.count("edit") / len(decided) if decided else 0.0)


def test_the_record_of_an_example_category() -> None:
    found = record(["approve", "", "approve", "edit", "approve", "reject"])
    assert (found.decided, found.clean_streak, found.edit_rate) == (5, 2, 0.2)
    assert record([]).edit_rate == 0.0
