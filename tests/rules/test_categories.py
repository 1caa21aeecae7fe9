"""Categories, graduation and the risk dial on SQLite and PostgreSQL: the maturity gate, human-only
flips, never_graduate, drift demotion from review outcomes (each counted once), dial inheritance."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.rules.v1.events_pb2 import CategoryChanged
from reviewloop.rules.v1.rules_pb2 import SaveRuleRequest
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, codec
from reviewloop.storage.inbox import ingest_each
from reviewloop.storage.schema import OUTBOX
from reviewloop.tenancy import ActorKind, Principal
from rules import app
from rules.__main__ import SPEC
from sqlalchemy import select

from tests.rules.test_app import SETTINGS, Tenant

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]


async def _code(coro: Awaitable[Any]) -> Code:
    try:
        await coro
    except DomainError as error:
        return error.code
    raise AssertionError("the call succeeded")


def outcome(t: Tenant, category_id: str, result: str, event_id: str | None = None) -> common_pb2.Event:
    body = {
        "review_id": new_id("rr"),
        "org_id": t.org,
        "project_id": t.project,
        "category_id": category_id,
        "outcome": result,
    }
    return common_pb2.Event(
        event_id=event_id or new_id("evt"),
        aggregate_id=body["review_id"],
        type="review_outcome",
        payload=orjson.dumps(body),
    )


async def _category_events(db: Database) -> list[dict[str, Any]]:
    async with db.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(OUTBOX).where(OUTBOX.c.type == "category_changed").order_by(OUTBOX.c.id)
            )
        ).all()
    return [codec.as_json_object(codec.decode(r.payload, CategoryChanged)) for r in rows]


async def ingest(env: app.Env, events: list[common_pb2.Event]) -> tuple[int, int]:
    """What the Ingest RPC does (``reviewloop.service.ingest``), as (accepted, duplicates)."""
    done = await ingest_each(env.db, events, app.SUBSCRIPTIONS)
    return done.accepted, done.duplicates


async def _new_category(env: app.Env, t: Tenant, **kw: Any) -> str:
    fields = {"name": "Sales Outreach", "description": "cold outbound", "scope": "", "never_graduate": False}
    view = await app.create_category(env, t.admin, **{**fields, **kw})
    return view.row.id


async def test_agents_create_categories_and_twins_are_refused(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    made = await app.create_category(
        env, t.agent, name="Sales Outreach", description="cold outbound", scope="", never_graduate=False
    )
    assert (made.row.author_kind, made.row.scope, made.row.state.value) == (
        "agent",
        "org_shared",
        "supervised",
    )
    assert made.row.id.startswith("cat_")
    try:
        await app.create_category(
            env, t.human, name=" sales   OUTREACH", description="", scope="", never_graduate=False
        )
    except DomainError as error:
        assert error.code is Code.CONFLICT and ("category_id", made.row.id) in error.hints
    else:
        raise AssertionError("a twin category was created")
    # Org-shared categories reach sibling projects; project ones do not.
    own = await app.create_category(
        env, t.admin, name="Internal", description="", scope="project", never_graduate=False
    )
    sibling = t.sibling_project()
    seen, _ = await app.list_categories(env, sibling, cursor="", limit=0)
    assert [v.row.id for v in seen] == [made.row.id]
    assert await _code(app.get_category(env, sibling, own.row.id)) is Code.NOT_FOUND
    # Names are display metadata: a rename keeps the id.
    renamed = await app.update_category(
        env, t.admin, made.row.id, name="Outbound", description=None, never_graduate=None
    )
    assert (renamed.row.id, renamed.row.name) == (made.row.id, "Outbound")
    # An agent renames (as it creates); the never_graduate lock is the console's.
    assert (
        await _code(
            app.update_category(env, t.agent, made.row.id, name=None, description=None, never_graduate=True)
        )
        is Code.FORBIDDEN_SCOPE
    )


async def _open_gate(env: app.Env, t: Tenant, cat: str) -> None:
    """A maturity gate met from the start (no approvals, no age), for tests about something else."""
    gate = {"graduate_min_approvals": 0, "graduate_min_age_hours": 0}
    await app.set_risk_dial(env, t.admin, account=None, categories=[(cat, gate)])


async def test_a_rejected_proposal_closes_with_its_reason_and_the_rung_stays(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat = await _new_category(env, t)
    await _open_gate(env, t, cat)
    proposal = await app.propose_graduation(env, t.agent, cat, "", "20 clean approvals")
    assert (
        await _code(app.reject_graduation_proposal(env, t.agent, proposal.id, "no")) is Code.FORBIDDEN_SCOPE
    )
    assert await _code(app.reject_graduation_proposal(env, t.admin, proposal.id, "  ")) is Code.BAD_REQUEST
    other_admin = Principal(t.org, new_id("prj"), ActorKind.ADMIN, new_id("key"))
    assert await _code(app.reject_graduation_proposal(env, other_admin, proposal.id, "no")) is Code.NOT_FOUND

    rejected = await app.reject_graduation_proposal(
        env, t.admin, proposal.id, "Wait for the Q3 pricing change."
    )
    assert (rejected.decision, rejected.reason, rejected.decided_by) == (
        "rejected",
        "Wait for the Q3 pricing change.",
        t.admin.actor_id,
    )
    assert (await app.get_category(env, t.agent, cat)).row.state.value == "supervised"  # stays on its rung
    assert await app.list_graduation_proposals(env, t.admin) == []  # closed: out of the queue
    # The agent reads the decision and the reason verbatim from its category's proposals.
    [seen] = await app.list_graduation_proposals(env, t.agent, cat)
    assert (seen.id, seen.decision, seen.reason) == (
        proposal.id,
        "rejected",
        "Wait for the Q3 pricing change.",
    )
    again = app.reject_graduation_proposal(env, t.admin, proposal.id, "still no")
    assert await _code(again) is Code.WRONG_STATE

    # A later proposal is approved by the graduation it asked for, and can no longer be rejected.
    second = await app.propose_graduation(env, t.agent, cat, "", "now?")
    await app.graduate(env, t.admin, cat, "auto_notify")
    decided = {p.id: p.decision for p in await app.list_graduation_proposals(env, t.agent, cat)}
    assert decided == {proposal.id: "rejected", second.id: "approved"}
    assert await _code(app.reject_graduation_proposal(env, t.admin, second.id, "no")) is Code.WRONG_STATE


async def test_only_a_human_graduates_and_every_rung_needs_the_maturity_gate(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat = await _new_category(env, t)
    await app.set_risk_dial(
        env,
        t.admin,
        account=None,
        categories=[(cat, {"graduate_min_approvals": 3, "graduate_min_age_hours": 0})],
    )
    # The spec's canonical status: supervised -> auto_notify with the gate unmet cannot graduate.
    status = await app.graduation_status(env, t.agent, cat)
    assert (status.state.value, status.next_state, status.maturity_gate_met, status.can_graduate) == (
        "supervised",
        "auto_notify",
        False,
        False,
    )
    assert await _code(app.graduate(env, t.admin, cat, "auto_notify")) is Code.MATURITY_GATE_UNMET

    proposal = await app.propose_graduation(env, t.agent, cat, "", "18 clean approvals in a row")
    assert proposal.to_state == "auto_notify"
    assert (await app.get_category(env, t.agent, cat)).row.state.value == "supervised"  # nothing flipped
    # The console's queue holds it until a human acts; agents cannot read the queue.
    [waiting] = await app.list_graduation_proposals(env, t.admin)
    assert (waiting.id, waiting.from_state, waiting.to_state, waiting.note) == (
        proposal.id,
        "supervised",
        "auto_notify",
        "18 clean approvals in a row",
    )
    assert not waiting.status.can_graduate
    assert await _code(app.list_graduation_proposals(env, t.agent)) is Code.FORBIDDEN_SCOPE
    assert await _code(app.graduate(env, t.agent, cat, "auto_notify")) is Code.FORBIDDEN_SCOPE
    assert (
        await _code(app.graduate(env, t.admin, cat, "auto_silent")) is Code.BAD_REQUEST
    )  # one rung at a time

    await ingest(env, [outcome(t, cat, "clean_approval") for _ in range(3)])
    assert (await app.graduation_status(env, t.agent, cat)).can_graduate
    graduated = await app.graduate(env, t.admin, cat, "auto_notify")
    assert graduated.row.state.value == "auto_notify"
    assert await app.list_graduation_proposals(env, t.admin) == []  # acted on: out of the queue
    assert await _code(app.graduate(env, t.admin, cat, "auto_silent")) is Code.MATURITY_GATE_UNMET
    gate = await app.graduation_status(env, t.agent, cat)  # the counters restart in the new rung
    assert (gate.approvals_met, gate.age_met, gate.maturity_gate_met, gate.can_graduate) == (
        False,
        True,
        False,
        False,
    )

    accepted, _ = await ingest(env, [outcome(t, cat, "clean_approval") for _ in range(3)])
    assert accepted == 3
    gate = await app.graduation_status(env, t.agent, cat)
    assert (gate.clean_approval_count, gate.maturity_gate_met, gate.can_graduate) == (3, True, True)
    top = await app.graduate(env, t.admin, cat, "auto_silent")
    assert top.row.state.value == "auto_silent" and top.row.clean_approval_count == 0
    final = await app.graduation_status(env, t.agent, cat)
    assert (final.next_state, final.can_graduate) == (None, False)
    assert [(e["state"], e["reason"]) for e in await _category_events(env.db)] == [
        ("auto_notify", "graduated"),
        ("auto_silent", "graduated"),
    ]


async def test_never_graduate_locks_the_category(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat = await _new_category(env, t, never_graduate=True)
    await _open_gate(env, t, cat)
    status = await app.graduation_status(env, t.agent, cat)
    assert status.never_graduate and not status.can_graduate
    assert await _code(app.propose_graduation(env, t.agent, cat, "", "")) is Code.GRADUATION_LOCKED
    assert await _code(app.graduate(env, t.admin, cat, "auto_notify")) is Code.GRADUATION_LOCKED
    await app.update_category(env, t.admin, cat, name=None, description=None, never_graduate=False)
    assert (await app.graduate(env, t.admin, cat, "auto_notify")).row.state.value == "auto_notify"


async def test_drift_demotes_a_rung_and_duplicate_outcome_events_count_once(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat = await _new_category(env, t)
    await app.set_risk_dial(env, t.admin, account={"drift_demote_after": 2}, categories=[])
    await _open_gate(env, t, cat)
    await app.graduate(env, t.admin, cat, "auto_notify")

    drift = outcome(t, cat, "drift")
    assert await ingest(env, [drift, drift]) == (1, 1)
    assert await ingest(env, [drift]) == (0, 1)
    assert (await app.get_category(env, t.agent, cat)).row.drift_count == 1
    await ingest(env, [outcome(t, cat, "clean_approval")])
    await ingest(env, [outcome(t, cat, "drift")])
    demoted = await app.get_category(env, t.agent, cat)
    assert (demoted.row.state.value, demoted.row.drift_count, demoted.row.clean_approval_count) == (
        "supervised",
        0,
        0,
    )
    assert (await _category_events(env.db))[-1] == {
        "org_id": t.org,
        "project_id": "",  # an org-shared category's rung holds org-wide
        "category_id": cat,
        "state": "supervised",
        "reason": "demoted",
    }
    # At the bottom rung drift accumulates but cannot demote further; unknown outcomes are dropped.
    await ingest(env, [outcome(t, cat, "rejection"), outcome(t, cat, "rejection"), outcome(t, cat, "weird")])
    bottom = await app.get_category(env, t.agent, cat)
    assert (bottom.row.state.value, bottom.row.drift_count) == ("supervised", 2)
    assert len(await _category_events(env.db)) == 2


async def test_risk_dial_overrides_inherit_the_account_defaults(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat, other = await _new_category(env, t), await _new_category(env, t, name="Support")
    dial = await app.get_risk_dial(env, t.agent)
    assert dial.account == {
        "min_confidence": 0.7,
        "first_contact_gate": True,
        "drift_demote_after": 3,
        "canary_rate": 0.1,
        "graduate_min_approvals": 20,
        "graduate_min_age_hours": 48,
        "auto_send_cap_per_day": 200,
        "quorum_approvals": 1,
        "quorum_review_agent": False,
        "review_deadline_minutes": 0,
        "quorum_panel": 0,
    }
    assert dial.categories == []
    dial = await app.set_risk_dial(
        env,
        t.admin,
        account={"auto_send_cap_per_day": 50},
        categories=[(cat, {"min_confidence": 0.85, "first_contact_gate": None})],
    )
    (entry,) = dial.categories
    assert entry.overrides == {"min_confidence": 0.85, "first_contact_gate": None}
    assert entry.effective == {**dial.account, "min_confidence": 0.85}
    assert entry.effective["auto_send_cap_per_day"] == 50
    # An account change flows into every category that does not override it.
    dial = await app.set_risk_dial(env, t.admin, account={"first_contact_gate": False}, categories=[])
    assert dial.categories[0].effective["first_contact_gate"] is False
    # A single category, overridden or not, resolves to the values in force.
    only = await app.get_risk_dial(env, t.agent, other)
    assert [(c.category_id, c.overrides) for c in only.categories] == [(other, {})]
    assert only.categories[0].effective == only.account
    # null returns an account field to the built-in default.
    dial = await app.set_risk_dial(env, t.admin, account={"auto_send_cap_per_day": None}, categories=[])
    assert dial.account["auto_send_cap_per_day"] == 200
    for bad in ({"min_confidence": 2}, {"drift_demote_after": 0}, {"canary_rate": "high"}, {"bogus": 1}):
        assert await _code(app.set_risk_dial(env, t.admin, account=bad, categories=[])) is Code.BAD_REQUEST
    assert (
        await _code(
            app.set_risk_dial(env, t.admin, account=None, categories=[("cat_nope", {"canary_rate": 0.5})])
        )
        is Code.NOT_FOUND
    )
    # Another project's dial is its own.
    assert (await app.get_risk_dial(env, t.sibling_project())).account["first_contact_gate"] is True


def _requested(t: Tenant, rule_id: str, text: str, event_id: str, **fields: str) -> common_pb2.Event:
    request = SaveRuleRequest(
        principal=t.human.to_proto(),
        rule_text=text,
        rule_layer="project",
        source_review_id=new_id("rr"),
        rule_id=rule_id,
        scope=fields.get("scope", "general"),
        category_id=fields.get("category_id", ""),
    )
    return common_pb2.Event(event_id=event_id, type="rule_requested", payload=codec.encode(request).encode())


async def test_a_decisions_rule_is_checked_by_a_dry_run_and_saved_once_from_the_outbox(
    open_db: OpenDb,
) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat = await _new_category(env, t)
    text = "Always propose a concrete time."
    # The dry run checks what a save checks and writes nothing.
    dry = app.RuleInput(rule_text=text, scope="general", category_id=cat, dry_run=True)
    assert await _code(app.save_rule(env, t.human, dry)) is Code.BAD_REQUEST  # a general rule has no category
    assert (
        await app.save_rule(env, t.human, app.RuleInput(rule_text=text, scope="general", dry_run=True))
        is None
    )
    assert (await app.get_rules(env, t.agent)).rules == []
    # The committed decision's rule arrives once, under the id its decision turn names.
    rule_id = new_id("rule")
    event = _requested(t, rule_id, text, "evt_r1")
    assert await ingest(env, [event, event]) == (1, 1)
    assert [v.rule.id for v in (await app.get_rules(env, t.agent)).rules] == [rule_id]
    # The same text again (saved since the dry run) keeps the one lineage and holds nothing back.
    assert await ingest(env, [_requested(t, new_id("rule"), text, "evt_r2")]) == (1, 0)
    category_rule = _requested(
        t, new_id("rule"), "Name the start date.", "evt_r3", scope="category", category_id=cat
    )
    assert await ingest(env, [category_rule]) == (1, 0)
    ids = {v.rule.id for v in (await app.get_rules(env, t.agent, category_id=cat)).rules}
    assert rule_id in ids and len(ids) == 2
