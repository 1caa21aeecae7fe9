"""How a write becomes the next revision of a lineage, as pure code: a new lineage takes the scope the
writer gave, a revision inherits its lineage's and sits at head.rev + 1 (property tests), and the
console's verbs move the high-water only when what is in force changes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reviewloop.errors import Code, DomainError
from rules.domain.ladder import (
    Action,
    Author,
    Draft,
    Kind,
    Layer,
    RuleRev,
    Scope,
    State,
    next_revision,
    restate,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
AGENT = Author("org_a", "prj_a", "agent", "agt_a", "agent")
HUMAN = Author("org_a", "prj_a", "human", "key_h", "human")


def _write(head: RuleRev | None, draft: Draft, author: Author = HUMAN, high_water: int = 7) -> RuleRev:
    return next_revision(
        head, draft, author, rule_id="rule_new", new_lineage_id="rln_new", high_water=high_water, now=NOW
    )


def _refusal(head: RuleRev | None, draft: Draft, author: Author = HUMAN) -> DomainError:
    with pytest.raises(DomainError) as caught:
        _write(head, draft, author)
    return caught.value


def _pointer(error: DomainError) -> str:
    assert error.code is Code.BAD_REQUEST
    return error.violations[0].field


def _draft(text: str = "Always propose a concrete time.", **fields: object) -> Draft:
    return Draft(rule_text=text, kind=Kind.SOFT, priority=0, **fields)  # type: ignore[arg-type]


def test_a_new_lineage_starts_at_rev_1_in_the_writers_project() -> None:
    rule = _write(None, _draft(source_review_id="rr_1"))
    assert (rule.id, rule.lineage_id, rule.rev, rule.action, rule.supersedes_id) == (
        "rule_new",
        "rln_new",
        1,
        Action.CREATED,
        "",
    )
    assert (rule.layer, rule.scope, rule.category_id, rule.org_id, rule.project_id) == (
        Layer.PROJECT,
        Scope.GENERAL,
        "",
        "org_a",
        "prj_a",
    )
    assert (rule.state, rule.high_water, rule.source_review_id, rule.created_at) == (
        State.ACTIVE,
        7,
        "rr_1",
        NOW,
    )
    assert (rule.author_kind, rule.changed_by_kind, rule.changed_by_id) == ("human", "human", "key_h")


def test_a_category_id_alone_makes_a_category_rule_and_house_style_has_no_project() -> None:
    assert _write(None, _draft(category_id="cat_a")).scope is Scope.CATEGORY
    house = _write(None, _draft(layer="org"))
    assert (house.layer, house.project_id) == (Layer.ORG, "")


@pytest.mark.parametrize(
    ("fields", "pointer"),
    [
        ({"scope": "category"}, "/category_id"),
        ({"scope": "general", "category_id": "cat_a"}, "/category_id"),
        ({"layer": "org", "category_id": "cat_a"}, "/scope"),
        ({"layer": "org", "agent_id": "agt_a"}, "/scope"),
        ({"scope": "everywhere"}, "/scope"),
        ({"layer": "team"}, "/rule_layer"),
    ],
)
def test_a_new_lineage_refuses_a_scope_that_contradicts_itself(fields: dict[str, str], pointer: str) -> None:
    assert _pointer(_refusal(None, _draft(**fields))) == pointer


def test_a_staged_authors_project_rule_is_born_proposed_and_leaves_the_high_water() -> None:
    staged = replace(AGENT, staged=True)
    rule = _write(None, _draft(), staged)
    assert (rule.state, rule.high_water, rule.author_kind) == (State.PROPOSED, 0, "agent")
    assert _write(None, _draft(layer="org"), staged).state is State.ACTIVE  # staging holds projects only


# --- revisions, as properties over any head --------------------------------------------------------

LINEAGE_FIELDS = ("layer", "project_id", "agent_id", "scope", "category_id", "lineage_id", "org_id")


@st.composite
def heads(draw: st.DrawFn) -> RuleRev:
    layer = draw(st.sampled_from(list(Layer)))
    scope = Scope.GENERAL if layer is Layer.ORG else draw(st.sampled_from(list(Scope)))
    return RuleRev(
        id="rule_head",
        lineage_id="rln_a",
        rev=draw(st.integers(1, 50)),
        layer=layer,
        org_id="org_a",
        project_id="" if layer is Layer.ORG else "prj_a",
        agent_id="" if layer is Layer.ORG else draw(st.sampled_from(["", "agt_a"])),
        scope=scope,
        category_id="cat_a" if scope is Scope.CATEGORY else "",
        kind=draw(st.sampled_from(list(Kind))),
        priority=draw(st.integers(-2, 2)),
        rule_text="Keep emails under 150 words.",
        source_review_id="",
        author_kind="human",
        state=draw(st.sampled_from(list(State))),
        action=Action.CREATED,
        changed_by_kind="human",
        changed_by_id="key_1",
        high_water=3,
        supersedes_id="",
        created_at=NOW,
    )


def _repeated(head: RuleRev, draw: st.DrawFn) -> dict[str, str]:
    """The lineage's own scope fields, each either repeated as the lineage has it or left out."""
    kept = {
        "layer": head.layer.value,
        "scope": head.scope.value,
        "category_id": head.category_id,
        "agent_id": head.agent_id,
    }
    return {name: value for name, value in kept.items() if draw(st.booleans())}


@given(head=heads(), data=st.data(), staged=st.booleans())
def test_a_revision_sits_at_head_rev_plus_one_and_keeps_its_lineage(
    head: RuleRev, data: st.DataObject, staged: bool
) -> None:
    draft = _draft("Keep emails under 100 words.", expected_rev=head.rev, **_repeated(head, data.draw))
    author = replace(HUMAN, staged=staged)
    rule = _write(head, draft, author)
    assert rule.rev == head.rev + 1
    assert all(getattr(rule, name) == getattr(head, name) for name in LINEAGE_FIELDS)
    assert (rule.supersedes_id, rule.action, rule.rule_text) == (
        head.id,
        Action.REVISED,
        "Keep emails under 100 words.",
    )
    proposed = staged and head.layer is Layer.PROJECT
    assert rule.state is (State.PROPOSED if proposed else State.ACTIVE)
    assert rule.high_water == (0 if proposed else 7)


@given(
    head=heads(),
    expected=st.integers(0, 51),
    field=st.sampled_from(["layer", "scope", "category_id", "agent_id"]),
)
def test_a_revision_against_another_rev_is_stale_before_anything_else(
    head: RuleRev, expected: int, field: str
) -> None:
    if expected == head.rev:
        expected += 1
    error = _refusal(head, _draft(expected_rev=expected, **{field: "other"}))
    assert (error.code, error.revision, error.state) == (Code.STALE, head.rev, head.state.value)


@given(head=heads(), data=st.data(), field=st.sampled_from(["layer", "scope", "category_id", "agent_id"]))
def test_a_revision_that_moves_its_lineage_is_refused_naming_the_field(
    head: RuleRev, data: st.DataObject, field: str
) -> None:
    given_fields = {**_repeated(head, data.draw), field: "other"}
    error = _refusal(head, _draft("Keep emails under 100 words.", expected_rev=head.rev, **given_fields))
    assert _pointer(error) == ("/rule_layer" if field == "layer" else f"/{field}")


@given(head=heads())
def test_a_revision_that_says_what_the_head_says_is_a_conflict(head: RuleRev) -> None:
    same = Draft(
        rule_text="  keep EMAILS under 150 words ",
        kind=head.kind,
        priority=head.priority,
        expected_rev=head.rev,
    )
    error = _refusal(head, same)
    assert error.code is Code.CONFLICT and ("rule_id", head.id) in error.hints


# --- the console's lineage verbs -------------------------------------------------------------------


def _rev(rev: int, state: State, text: str = "Keep emails under 150 words.") -> RuleRev:
    return RuleRev(
        id=f"rule_{rev}",
        lineage_id="rln_a",
        rev=rev,
        layer=Layer.PROJECT,
        org_id="org_a",
        project_id="prj_a",
        agent_id="",
        scope=Scope.GENERAL,
        category_id="",
        kind=Kind.SOFT,
        priority=0,
        rule_text=text,
        source_review_id="",
        author_kind="agent",
        state=state,
        action=Action.CREATED,
        changed_by_kind="agent",
        changed_by_id="agt_a",
        high_water=0,
        supersedes_id="",
        created_at=NOW,
    )


def _restate(history: list[RuleRev], source: RuleRev, action: Action, state: State) -> RuleRev:
    admin = Author("org_a", "prj_a", "admin", "key_a", "human")
    return restate(
        history, source, action=action, state=state, author=admin, rule_id="rule_new", high_water=9, now=NOW
    )


def test_restating_copies_the_source_as_the_next_rev_by_the_console() -> None:
    history = [_rev(1, State.ACTIVE), _rev(2, State.ACTIVE, "Keep emails under 100 words.")]
    undone = _restate(history, history[0], Action.UNDONE, State.ACTIVE)
    assert (undone.rev, undone.rule_text, undone.supersedes_id, undone.action) == (
        3,
        "Keep emails under 150 words.",
        "rule_2",
        Action.UNDONE,
    )
    assert (undone.changed_by_kind, undone.changed_by_id, undone.author_kind) == ("admin", "key_a", "agent")
    assert undone.high_water == 9  # the text in force changed


def test_only_a_change_to_what_is_in_force_moves_the_high_water() -> None:
    proposal = [_rev(1, State.ACTIVE), _rev(2, State.PROPOSED, "Keep emails under 100 words.")]
    assert _restate(proposal, proposal[1], Action.APPROVED, State.ACTIVE).high_water == 9
    assert _restate(proposal, proposal[0], Action.REJECTED, State.ACTIVE).high_water == 0
    first_proposal = [_rev(1, State.PROPOSED)]
    assert _restate(first_proposal, first_proposal[0], Action.REJECTED, State.RETIRED).high_water == 0
    active = [_rev(1, State.ACTIVE)]
    assert _restate(active, active[0], Action.RETIRED, State.RETIRED).high_water == 9
