"""A rule proposed from an edit and the rules it may conflict with (issue 38), as pure functions: the
proposal quotes the edit's changed words, and a conflict is only ever a live rule of the same place."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from rules.domain.guardrails import MAX_RULE_CHARS
from rules.domain.ladder import Action, Kind, Layer, RuleRev, Scope, State
from rules.domain.proposal import Change, conflicts, propose, same_place

NOW = datetime(2026, 12, 7, tzinfo=UTC)


def rule(text: str, n: int = 1, **changes: object) -> RuleRev:
    base = RuleRev(
        id=f"rule_{n:026d}",
        lineage_id=f"rln_{n:026d}",
        rev=1,
        layer=Layer.PROJECT,
        org_id="org_1",
        project_id="prj_1",
        agent_id="",
        scope=Scope.CATEGORY,
        category_id="cat_1",
        kind=Kind.SOFT,
        priority=0,
        rule_text=text,
        source_review_id="",
        author_kind="human",
        state=State.ACTIVE,
        action=Action.CREATED,
        changed_by_kind="human",
        changed_by_id="key_1",
        high_water=n,
        supersedes_id="",
        created_at=NOW,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_proposal_quotes_each_changed_run_of_words() -> None:
    changes = [
        Change("replace", "let me know your thoughts. ", "can you do Thursday 2pm? "),
        Change("delete", "Cheers,\n", ""),
        Change("insert", "", "Pilot ROI attached."),
    ]
    assert propose(changes) == (
        "Write “can you do Thursday 2pm” instead of “let me know your thoughts”. "
        "Leave out “Cheers”. Include “Pilot ROI attached”."
    )
    assert propose([Change("replace", " ", "  ")]) == ""


@given(st.lists(st.builds(Change, st.sampled_from(["replace", "insert", "delete"]), st.text(), st.text())))
def test_a_proposal_is_a_rule_text_of_at_most_three_sentences(changes: list[Change]) -> None:
    text = propose(changes)
    assert len(text) <= MAX_RULE_CHARS
    assert text.count("”.") <= 3


def test_same_text_is_a_duplicate_negated_shared_words_a_contradiction_shared_words_an_overlap() -> None:
    candidate = rule("Never mention pricing in the first email.", 9)
    ladder = [
        rule("never mention pricing in the first email", 1),
        rule("Mention pricing in the first email, up front.", 2),
        rule("Do not bring up pricing in a first email.", 3),  # negated as well: it says the same
        rule("Sign off with the rep's first name.", 4),  # shares too little
        rule("Never mention pricing in the first email.", 5, category_id="cat_2"),  # another place
        rule("Never mention pricing in the first email.", 6, state=State.RETIRED),  # retired
    ]
    found = [(c.rule.id, c.kind) for c in conflicts(candidate, ladder)]
    assert found == [
        (ladder[0].id, "duplicate"),
        (ladder[1].id, "contradiction"),
        (ladder[2].id, "overlap"),
    ]


texts = st.lists(
    st.sampled_from(["never", "mention", "pricing", "first", "email", "thursday", "the"]), max_size=8
).map(" ".join)
places = st.sampled_from(
    [{}, {"category_id": "cat_2"}, {"agent_id": "agt_1"}, {"layer": Layer.ORG, "project_id": ""}]
)


@given(texts, st.lists(st.tuples(texts, places, st.sampled_from(list(State))), max_size=8))
def test_a_conflict_is_a_live_rule_of_the_same_place_and_never_the_candidates_lineage(
    text: str, others: list[tuple[str, dict[str, object], State]]
) -> None:
    candidate = rule(text or "x", 99)
    ladder = [rule(t or "y", n, state=s, **p) for n, (t, p, s) in enumerate(others, start=1)]
    ladder.append(rule(text or "x", 99, rev=0))  # the candidate's own lineage is never a conflict
    for found in conflicts(candidate, ladder):
        assert same_place(found.rule, candidate)
        assert found.rule.state is not State.RETIRED
        assert found.rule.lineage_id != candidate.lineage_id
