"""The ladder as pure code: the effective stack equals a plain reference ordering (property test)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rules.domain.ladder import Action, Kind, Layer, RuleRev, Scope, State, effective_stack

ORG, PROJECT = "org_a", "prj_a"
AGENTS = ["agt_a", "agt_b"]
CATEGORIES = ["cat_a", "cat_b"]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@st.composite
def lineages(draw: st.DrawFn) -> list[RuleRev]:
    """A random rule set: lineages across layers, projects, agents and categories, each with a few
    revisions in random states (proposals on top, retirements, revivals)."""
    revisions: list[RuleRev] = []
    for n in range(draw(st.integers(0, 14))):
        layer = draw(st.sampled_from(list(Layer)))
        scope = Scope.GENERAL if layer is Layer.ORG else draw(st.sampled_from(list(Scope)))
        lineage: dict[str, Any] = {
            "lineage_id": f"rln_{n:03d}",
            "layer": layer,
            "org_id": draw(st.sampled_from([ORG, ORG, ORG, "org_other"])),
            "project_id": ""
            if layer is Layer.ORG
            else draw(st.sampled_from([PROJECT, PROJECT, "prj_other"])),
            "agent_id": "" if layer is Layer.ORG else draw(st.sampled_from(["", "", *AGENTS])),
            "scope": scope,
            "category_id": draw(st.sampled_from(CATEGORIES)) if scope is Scope.CATEGORY else "",
        }
        for rev in range(1, draw(st.integers(1, 4)) + 1):
            revisions.append(
                RuleRev(
                    id=f"rule_{n:03d}_{rev}",
                    rev=rev,
                    kind=Kind.SOFT,
                    priority=draw(st.integers(-2, 2)),
                    rule_text=f"text {n} {rev}",
                    source_review_id="",
                    author_kind="human",
                    state=draw(st.sampled_from(list(State))),
                    action=Action.REVISED,
                    changed_by_kind="human",
                    changed_by_id="key_1",
                    high_water=0,
                    supersedes_id="",
                    created_at=NOW,
                    **lineage,
                )
            )
    return draw(st.permutations(revisions))


def reference(revisions: list[RuleRev], agent_id: str, category_id: str) -> list[tuple[str, int]]:
    """The ladder written out by hand, rung by rung."""
    current = []
    for lineage_id in sorted({r.lineage_id for r in revisions}):
        history = sorted((r for r in revisions if r.lineage_id == lineage_id), key=lambda r: r.rev)
        settled = [r for r in history if r.state is not State.PROPOSED]
        if settled and settled[-1].state is State.ACTIVE:
            current.append(settled[-1])

    def mine(r: RuleRev) -> bool:
        return r.org_id == ORG and (r.layer is Layer.ORG or r.project_id == PROJECT)

    def category_ok(r: RuleRev) -> bool:
        return r.scope is Scope.GENERAL or not category_id or r.category_id == category_id

    rungs = [
        [
            r
            for r in current
            if mine(r) and r.layer is Layer.PROJECT and r.agent_id == agent_id and agent_id and category_ok(r)
        ],
        [
            r
            for r in current
            if mine(r)
            and r.layer is Layer.PROJECT
            and not r.agent_id
            and r.scope is Scope.CATEGORY
            and category_ok(r)
        ],
        [
            r
            for r in current
            if mine(r) and r.layer is Layer.PROJECT and not r.agent_id and r.scope is Scope.GENERAL
        ],
        [r for r in current if mine(r) and r.layer is Layer.ORG],
    ]
    ordered = []
    for rung in rungs:
        ordered += sorted(rung, key=lambda r: (-r.priority, r.lineage_id))
    return [(r.lineage_id, r.rev) for r in ordered]


@settings(max_examples=150, deadline=None)
@given(lineages(), st.sampled_from(["", *AGENTS]), st.sampled_from(["", *CATEGORIES]))
def test_effective_stack_equals_the_reference_ladder(
    revisions: list[RuleRev], agent_id: str, category_id: str
) -> None:
    stack = effective_stack(
        revisions, org_id=ORG, project_id=PROJECT, agent_id=agent_id, category_id=category_id
    )
    assert [(r.lineage_id, r.rev) for r in stack] == reference(revisions, agent_id, category_id)
