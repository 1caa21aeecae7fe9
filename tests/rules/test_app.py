"""rules use cases on SQLite and PostgreSQL: the ladder, supersession under concurrency, the write
guardrails, staged approval, undo, composition tokens and the outbox."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.rules.v1.events_pb2 import RuleChanged
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database, codec
from reviewloop.storage.schema import OUTBOX
from reviewloop.tenancy import ActorKind, Principal
from rules import app, store
from rules.__main__ import SPEC
from rules.app import RuleInput, TokenStatus
from rules.bootstrap import settings_from_env
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from tests.rules.test_ladder import reference

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
SETTINGS = app.Settings(token_ttl_s=900)


class Tenant:
    """One org and project with an agent, a second agent, a human and an admin key."""

    def __init__(self) -> None:
        self.org, self.project = new_id("org"), new_id("prj")
        self.agent = Principal(self.org, self.project, ActorKind.AGENT, new_id("agt"))
        self.other_agent = Principal(self.org, self.project, ActorKind.AGENT, new_id("agt"))
        self.human = Principal(self.org, self.project, ActorKind.HUMAN, new_id("key"))
        self.admin = Principal(self.org, self.project, ActorKind.ADMIN, new_id("key"))

    def sibling_project(self) -> Principal:
        return Principal(self.org, new_id("prj"), ActorKind.AGENT, new_id("agt"))


async def _code(coro: Awaitable[Any]) -> Code:
    try:
        await coro
    except DomainError as error:
        return error.code
    raise AssertionError("the call succeeded")


async def _events(db: Database, type_: str) -> list[dict[str, Any]]:
    async with db.engine.connect() as conn:
        rows = (await conn.execute(select(OUTBOX).where(OUTBOX.c.type == type_).order_by(OUTBOX.c.id))).all()
    return [codec.as_json_object(codec.decode(r.payload, RuleChanged)) for r in rows]


async def _category(env: app.Env, who: Principal, name: str = "Sales Outreach") -> str:
    view = await app.create_category(env, who, name=name, description="", scope="", never_graduate=False)
    return view.row.id


async def _save(env: app.Env, who: Principal, text: str, **fields: Any) -> app.RuleView:
    return await app.save_rule(env, who, RuleInput(rule_text=text, **fields))


async def test_get_rules_applies_the_ladder_server_side(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat = await _category(env, t.admin)
    house = await _save(env, t.admin, "Sign every email with the company name.", rule_layer="org")
    general_low = await _save(env, t.human, "Keep emails under 150 words.", priority=-1)
    general_high = await _save(env, t.human, "Never use exclamation marks.", priority=5)
    category = await _save(env, t.agent, "Always propose a concrete time.", category_id=cat)
    mine = await _save(env, t.agent, "Open with the prospect's first name.", agent_id=t.agent.actor_id)
    await _save(env, t.other_agent, "Write in the first person plural.", agent_id=t.other_agent.actor_id)
    sibling = t.sibling_project()
    await _save(env, sibling, "Rules of another project stay there.")

    snapshot = await app.get_rules(env, t.agent, category_id=cat)
    assert [v.rule.id for v in snapshot.rules] == [
        mine.rule.id,
        category.rule.id,
        general_high.rule.id,
        general_low.rule.id,
        house.rule.id,
    ]
    assert {v.status for v in snapshot.rules} == {"active"}
    assert snapshot.house_style_version == 1 and snapshot.category_rules_version == 1
    assert snapshot.rule_high_water == max(v.rule.high_water for v in snapshot.rules)
    assert snapshot.composition_token.startswith("ct1.")

    # The sibling project inherits the house style only.
    sibling_stack = await app.get_rules(env, sibling)
    assert [v.rule.rule_text for v in sibling_stack.rules] == [
        "Rules of another project stay there.",
        "Sign every email with the company name.",
    ]
    # A scope-filtered call is browsing: no token.
    browsing = await app.get_rules(env, t.agent, scope="general")
    assert browsing.composition_token == ""
    assert [v.rule.scope.value for v in browsing.rules] == ["general"] * 4


_SHARED: dict[int, Database] = {}


async def _shared_db(open_db: OpenDb) -> Database:
    """One store for every example of a property test (each example is its own tenant)."""
    if id(open_db) not in _SHARED:
        _SHARED.clear()
        _SHARED[id(open_db)] = await open_db(SPEC)
    return _SHARED[id(open_db)]


OPS = st.lists(
    st.tuples(
        st.sampled_from(["org", "general", "category", "agent", "other_agent", "revise", "retire"]),
        st.integers(-2, 2),
        st.integers(0, 1),
    ),
    max_size=10,
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS, staged=st.booleans(), category_pick=st.integers(-1, 1))
async def test_stored_rule_sets_read_back_in_reference_ladder_order(
    open_db: OpenDb, ops: list[tuple[str, int, int]], staged: bool, category_pick: int
) -> None:
    """Property: whatever rules were written, revised, retired or staged, get_rules answers the
    plain reference ordering of the ladder over what the store holds."""
    env, t = app.Env(await _shared_db(open_db), SETTINGS), Tenant()
    cats = [await _category(env, t.admin, f"Category {i}") for i in range(2)]
    await app.set_rule_settings(env, t.admin, staged)
    heads: dict[str, int] = {}
    for i, (kind, priority, pick) in enumerate(ops):
        text = f"Rule number {i} says something specific."
        if kind in ("revise", "retire"):
            if not heads:
                continue
            lineage = sorted(heads)[pick % len(heads)]
            try:
                if kind == "revise":
                    view = await _save(env, t.admin, text, lineage_id=lineage, expected_rev=heads[lineage])
                else:
                    view = await app.retire_rule(env, t.admin, lineage, heads[lineage])
            except DomainError as error:  # retiring twice, or a pending proposal on top
                assert error.code is Code.WRONG_STATE
                continue
        elif kind == "org":
            view = await _save(env, t.admin, text, rule_layer="org", priority=priority)
        elif kind == "general":
            view = await _save(env, t.agent, text, priority=priority)
        elif kind == "category":
            view = await _save(env, t.agent, text, category_id=cats[pick], priority=priority)
        else:
            who = t.agent if kind == "agent" else t.other_agent
            view = await _save(env, who, text, agent_id=who.actor_id, priority=priority)
        heads[view.rule.lineage_id] = view.rule.rev
    category_id = cats[category_pick] if category_pick >= 0 else ""
    snapshot = await app.get_rules(env, t.agent, category_id=category_id)
    async with env.db.engine.connect() as conn:
        stored = await store.revisions_on_ladder(conn, t.org, t.project)
    renamed = [
        replace(r, org_id="org_a", project_id="prj_a" if r.project_id else "", category_id=r.category_id)
        for r in stored
    ]
    assert [(v.rule.lineage_id, v.rule.rev) for v in snapshot.rules] == reference(
        renamed, t.agent.actor_id, category_id
    )


async def test_concurrent_saves_against_one_rev_one_wins_the_other_is_stale(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    first = await _save(env, t.human, "Always propose a concrete time.")
    lineage = first.rule.lineage_id

    async def revise(text: str) -> str:
        try:
            view = await _save(env, t.human, text, lineage_id=lineage, expected_rev=1)
        except DomainError as error:
            return error.code.value
        return view.status

    outcomes = await asyncio.gather(*(revise(f"Propose a concrete time, variant {i}.") for i in range(4)))
    assert sorted(outcomes) == ["active", "stale", "stale", "stale"]
    history = await app.rule_history(env, t.human, lineage)
    assert [(v.rule.rev, v.status, v.rule.action.value) for v in history] == [
        (1, "superseded", "created"),
        (2, "active", "revised"),
    ]
    assert history[1].rule.supersedes_id == first.rule.id
    # Saving against the superseded rev is stale too, and names the current rev.
    try:
        await _save(env, t.human, "Yet another take on it.", lineage_id=lineage, expected_rev=1)
    except DomainError as error:
        assert error.code is Code.STALE and error.revision == 2
    else:
        raise AssertionError("a save against a superseded rev was accepted")
    # The unique (lineage, rev) constraint is the backstop when two writers pass the check.
    async with env.db.transaction() as uow:
        with pytest.raises(IntegrityError):
            await store.add_revision(uow.conn, history[1].rule, "dup")


async def test_duplicate_text_in_the_same_scope_is_refused_naming_the_rule(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat = await _category(env, t.admin)
    kept = await _save(env, t.agent, "Always propose a concrete time.")
    try:
        await _save(env, t.agent, "  always PROPOSE a concrete   time ")
    except DomainError as error:
        assert error.code is Code.CONFLICT
        assert kept.rule.id in error.detail and ("lineage_id", kept.rule.lineage_id) in error.hints
    else:
        raise AssertionError("a duplicate rule was accepted")
    # Another scope may say the same thing.
    await _save(env, t.agent, "Always propose a concrete time.", category_id=cat)


SECRETS = [
    "AKIAIOSFODNN7EXAMPLE",
    "password: hunter2hunter2",
    "-----BEGIN RSA PRIVATE KEY-----",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123",
    "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijk",
    "https://bob:s3cretpass@crm.example.com",
]


@pytest.mark.parametrize("secret", SECRETS)
async def test_rule_text_holding_a_credential_is_refused_and_never_stored(
    open_db: OpenDb, secret: str
) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    try:
        await _save(env, t.agent, f"When you call the CRM, use {secret} to sign in.")
    except DomainError as error:
        assert error.code is Code.BAD_REQUEST and "looks like" in error.detail
        assert secret not in error.detail  # the secret is never echoed
    else:
        raise AssertionError("a rule holding a secret was stored")
    assert (await app.get_rules(env, t.agent)).rules == []
    async with env.db.engine.connect() as conn:
        assert await store.revisions_on_ladder(conn, t.org, t.project) == []


@pytest.mark.parametrize(
    "text", ["", "   ", "TODO", "Always {{placeholder}} here.", "x" * 2001, "lorem ipsum dolor sit"]
)
async def test_lint_refuses_empty_overlong_and_placeholder_text(open_db: OpenDb, text: str) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    assert await _code(_save(env, t.agent, text)) is Code.BAD_REQUEST
    assert await _events(env.db, "rule_changed") == []


async def test_agents_never_write_house_style_or_console_verbs(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    assert (
        await _code(_save(env, t.agent, "Sign every email as the CEO.", rule_layer="org"))
        is Code.FORBIDDEN_SCOPE
    )
    rule = await _save(env, t.agent, "Keep subject lines short.")
    lineage = rule.rule.lineage_id
    # Approving and rejecting are the console's; an agent may retire or undo its project rules.
    for verb in (app.approve_rule, app.reject_rule):
        assert await _code(verb(env, t.agent, lineage, 1)) is Code.FORBIDDEN_SCOPE
    assert await _code(app.set_rule_settings(env, t.agent, True)) is Code.FORBIDDEN_SCOPE
    assert await _code(app.set_risk_dial(env, t.agent, account={"canary_rate": 1}, categories=[])) is (
        Code.FORBIDDEN_SCOPE
    )
    # An agent writes per-agent rules for itself only.
    assert (
        await _code(_save(env, t.agent, "Sign as the other agent.", agent_id=t.other_agent.actor_id))
        is Code.FORBIDDEN_SCOPE
    )


async def test_staged_approval_keeps_proposals_out_of_the_stack_until_a_human_approves(
    open_db: OpenDb,
) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    await app.set_rule_settings(env, t.admin, True)
    before = await app.get_rules(env, t.agent)
    proposed = await _save(env, t.agent, "Always propose a concrete time.")
    assert proposed.status == "proposed" and proposed.rule.high_water == 0
    after = await app.get_rules(env, t.agent)
    assert after.rules == [] and after.rule_high_water == before.rule_high_water
    pending = await app.get_rules(env, t.human, status="proposed")
    assert [v.rule.id for v in pending.rules] == [proposed.rule.id] and pending.composition_token == ""
    assert await _events(env.db, "rule_changed") == []
    # Humans are not staged.
    assert (await _save(env, t.human, "Never use exclamation marks.")).status == "active"

    approved = await app.approve_rule(env, t.admin, proposed.rule.lineage_id, 1)
    assert (approved.status, approved.rule.rev, approved.rule.author_kind) == ("active", 2, "agent")
    stack = await app.get_rules(env, t.agent)
    assert "Always propose a concrete time." in [v.rule.rule_text for v in stack.rules]
    assert stack.rule_high_water == approved.rule.high_water > after.rule_high_water

    # A revision proposed on top leaves rev 2 in force; rejecting it keeps rev 2's text in force.
    revised = await _save(
        env,
        t.agent,
        "Always propose two concrete times.",
        lineage_id=approved.rule.lineage_id,
        expected_rev=2,
    )
    assert revised.status == "proposed"
    texts = [v.rule.rule_text for v in (await app.get_rules(env, t.agent)).rules]
    assert "Always propose a concrete time." in texts
    rejected = await app.reject_rule(env, t.human, approved.rule.lineage_id, 3)
    assert rejected.rule.rule_text == "Always propose a concrete time." and rejected.rule.high_water == 0
    history = await app.rule_history(env, t.human, approved.rule.lineage_id)
    assert [(v.rule.action.value, v.status) for v in history] == [
        ("created", "superseded"),
        ("approved", "superseded"),
        ("revised", "superseded"),
        ("rejected", "active"),
    ]
    assert await _code(app.approve_rule(env, t.admin, approved.rule.lineage_id, 4)) is Code.WRONG_STATE


async def test_undo_restores_the_previous_text_and_undoing_a_creation_retires(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    first = await _save(env, t.human, "Keep emails under 150 words.")
    lineage = first.rule.lineage_id
    await _save(env, t.human, "Keep emails under 100 words.", lineage_id=lineage, expected_rev=1)
    undone = await app.undo_rule(env, t.admin, lineage, 2)
    assert (undone.rule.rev, undone.rule.rule_text, undone.status) == (
        3,
        "Keep emails under 150 words.",
        "active",
    )
    assert await _code(app.undo_rule(env, t.admin, lineage, 2)) is Code.STALE

    retired = await app.retire_rule(env, t.admin, lineage, 3)
    assert retired.status == "retired"
    assert (await app.get_rules(env, t.agent)).rules == []
    revived = await app.undo_rule(env, t.admin, lineage, 4)
    assert revived.status == "active" and revived.rule.rule_text == "Keep emails under 150 words."
    history = await app.rule_history(env, t.human, lineage)
    assert [v.rule.action.value for v in history] == ["created", "revised", "undone", "retired", "undone"]
    assert [v.rule.changed_by_kind for v in history] == ["human", "human", "admin", "admin", "admin"]

    fresh = await _save(env, t.human, "Write like a person, not a brochure.")
    gone = await app.undo_rule(env, t.admin, fresh.rule.lineage_id, 1)
    assert gone.status == "retired"
    # Every change that moved the stack reached the outbox, in high-water order.
    marks = [e["rule_high_water"] for e in await _events(env.db, "rule_changed")]
    assert len(marks) == 7 and marks == sorted(marks)


async def test_save_rule_honours_the_idempotency_key(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    one = await _save(env, t.agent, "Always propose a concrete time.", idempotency_key="k1")
    again = await _save(env, t.agent, "Always propose a concrete time.", idempotency_key="k1")
    assert one.rule.id == again.rule.id
    assert await _code(_save(env, t.agent, "Something else entirely here.", idempotency_key="k1")) is (
        Code.IDEMPOTENCY_CONFLICT
    )
    assert len(await _events(env.db, "rule_changed")) == 1


async def test_composition_token_valid_expired_stale_and_scoped(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat, other_cat = await _category(env, t.admin, "Sales"), await _category(env, t.admin, "Support")
    await _save(env, t.human, "Always propose a concrete time.", category_id=cat)
    token = (await app.get_rules(env, t.agent, category_id=cat)).composition_token

    async def check(
        who: Principal = t.agent, tok: str = token, category: str = cat, **kw: Any
    ) -> TokenStatus:
        return (await app.validate_composition_token(env, who, tok, category, **kw)).status

    assert await check() is TokenStatus.VALID
    assert await check(now=10**12) is TokenStatus.EXPIRED
    # Changes out of the token's scope leave it valid.
    await _save(env, t.human, "Answer support tickets within a day.", category_id=other_cat)
    await _save(env, t.other_agent, "Sign as Bob.", agent_id=t.other_agent.actor_id)
    await _save(env, t.sibling_project(), "A sibling project's rule.")
    assert await check() is TokenStatus.VALID
    # Another principal or category, a forged or altered token: invalid.
    assert await check(who=t.other_agent) is TokenStatus.INVALID
    assert await check(category=other_cat) is TokenStatus.INVALID
    head, body, mac = token.split(".")
    # The MAC's first character: all six of its bits are the first byte's (a last one's may be padding).
    forged = ("B" if mac[0] == "A" else "A") + mac[1:]
    assert await check(tok=f"{head}.{body}.{forged}") is TokenStatus.INVALID
    tampered = body[:-3] + ("A" if body[-3] != "A" else "B") + body[-2:]
    assert await check(tok=f"{head}.{tampered}.{mac}") is TokenStatus.INVALID
    assert await check(tok="not-a-token") is TokenStatus.INVALID
    # A rotated key leaves tokens signed by the older key verifiable.
    await app.rotate_composition_key(env, t.admin)
    assert await check() is TokenStatus.VALID
    # A change in scope (a house-style rule reaches every ladder) makes it stale.
    await _save(env, t.admin, "Sign every email with the company name.", rule_layer="org")
    result = await app.validate_composition_token(env, t.agent, token, cat)
    assert (
        result.status is TokenStatus.STALE and result.current_rule_high_water > result.token_rule_high_water
    )
    fresh = (await app.get_rules(env, t.agent, category_id=cat)).composition_token
    assert await check(tok=fresh) is TokenStatus.VALID


async def test_an_unscoped_token_goes_stale_only_for_the_drafts_category(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    cat, other_cat = await _category(env, t.admin, "Sales"), await _category(env, t.admin, "Support")
    token = (await app.get_rules(env, t.agent)).composition_token
    await _save(env, t.human, "Answer support tickets within a day.", category_id=other_cat)
    assert (await app.validate_composition_token(env, t.agent, token, cat)).status is TokenStatus.VALID
    assert (await app.validate_composition_token(env, t.agent, token, other_cat)).status is TokenStatus.STALE
    assert (await app.validate_composition_token(env, t.agent, token, "")).status is TokenStatus.STALE


async def test_expiry_follows_the_configured_ttl(open_db: OpenDb) -> None:
    env, t = app.Env(await open_db(SPEC), SETTINGS), Tenant()
    short = settings_from_env(
        {"REVIEWLOOP_COMPOSITION_TOKEN_TTL_S": "60", "REVIEWLOOP_COMPOSITION_TOKEN_KEY": "k"}
    )
    assert short.token_key == b"k"
    short = replace(short, token_key=SETTINGS.token_key)
    snapshot = await app.get_rules(replace(env, settings=short), t.agent)
    expires = snapshot.composition_token_expires_at
    assert expires is not None
    token = snapshot.composition_token
    at = expires.timestamp()
    assert (
        await app.validate_composition_token(env, t.agent, token, "", now=at - 1)
    ).status is TokenStatus.VALID
    assert (
        await app.validate_composition_token(env, t.agent, token, "", now=at)
    ).status is TokenStatus.EXPIRED
    assert 55 <= at - time.time() <= 61
