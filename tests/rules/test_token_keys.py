"""Issue 35: the composition-token signing key is derived from a deployment secret, as the webhook key
is, so a copy of the rules store cannot mint tokens; legacy keys kept in plain verify the tokens already
out for one token lifetime, sign nothing, and are then wiped."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from typing import Any

from reviewloop.storage import make_engine, utcnow
from reviewloop.tenancy import ActorKind, Principal
from rules import app
from rules.__main__ import SPEC
from rules.app.stack import TokenStatus
from rules.domain import token as tokens
from rules.store import token_keys
from sqlalchemy import insert, select, update

from tests.conftest import Api, draft

AGENT = Principal("org_k", "prj_k", ActorKind.AGENT, "agt_k")
SETTINGS = app.Settings(token_ttl_s=900, token_key=b"deployment-secret")


def _forgeries(token: str, rows: list[Any]) -> list[str]:
    """Tokens for the same claims, signed with everything a copy of the store holds."""
    claims = tokens.read_unverified(token)
    assert claims is not None
    later = dataclasses.replace(claims, expires_at=claims.expires_at + 3600)
    forged = []
    for row in rows:
        for material in (row.salt, row.key_ref, row.key_id):
            if material:
                forged.append(tokens.sign(later, material.encode()))
                forged.append(tokens.sign(later, tokens.derive_key(b"", row.key_id, row.salt or "")))
    return forged


async def test_the_store_holds_no_key_and_a_copy_of_it_mints_nothing(open_db: Any) -> None:
    env = app.Env(await open_db(SPEC), SETTINGS)
    await app.ensure_token_key(env)
    token = (await app.get_rules(env, AGENT)).composition_token
    assert token and (await app.validate_composition_token(env, AGENT, token, "")).status is TokenStatus.VALID
    async with env.db.engine.connect() as conn:
        rows = (await conn.execute(select(token_keys))).all()
    assert rows and all(row.secret is None and row.salt and row.key_ref for row in rows)
    for forged in _forgeries(token, rows):
        assert (await app.validate_composition_token(env, AGENT, forged, "")).status is TokenStatus.INVALID
    # Under another deployment key the old tokens are invalid, and a new key is derived to sign.
    other = dataclasses.replace(env, settings=dataclasses.replace(SETTINGS, token_key=b"another"))
    assert (await app.validate_composition_token(other, AGENT, token, "")).status is TokenStatus.INVALID
    fresh = (await app.get_rules(other, AGENT)).composition_token
    assert (await app.validate_composition_token(other, AGENT, fresh, "")).status is TokenStatus.VALID


async def test_a_legacy_plain_key_verifies_its_tokens_for_one_lifetime_then_is_wiped(open_db: Any) -> None:
    env = app.Env(await open_db(SPEC), SETTINGS)
    secret = b"l" * 32
    async with env.db.transaction() as uow:
        await uow.conn.execute(
            insert(token_keys).values(key_id="ck_legacy", secret=secret.hex(), created_at=utcnow())
        )
    claims = tokens.Claims("ck_legacy", "org_k", "prj_k", "agt_k", "", 0, int(time.time()) + 600)
    legacy_token = tokens.sign(claims, secret)
    await app.ensure_token_key(env)  # the first boot after the upgrade
    assert (await app.validate_composition_token(env, AGENT, legacy_token, "")).status is TokenStatus.VALID
    new_token = (await app.get_rules(env, AGENT)).composition_token
    assert tokens.read_unverified(new_token or "").key_id != "ck_legacy"  # type: ignore[union-attr]
    # Once its grace is over the next boot wipes it, and its tokens are invalid.
    async with env.db.transaction() as uow:
        await uow.conn.execute(
            update(token_keys)
            .where(token_keys.c.key_id == "ck_legacy")
            .values(retire_at=utcnow() - timedelta(seconds=1))
        )
    await app.ensure_token_key(env)
    async with env.db.engine.connect() as conn:
        row = (await conn.execute(select(token_keys).where(token_keys.c.key_id == "ck_legacy"))).one()
    assert row.secret is None
    assert (await app.validate_composition_token(env, AGENT, legacy_token, "")).status is TokenStatus.INVALID


async def test_through_the_gateway_a_token_minted_from_a_store_copy_is_refused(api: Api) -> None:
    agent = await api.agent()
    rules = await api.http.get("/v1/rules", headers=agent)
    assert rules.status_code == 200, rules.text
    token = rules.json()["composition_token"]
    engine = make_engine(api.stack.env["REVIEWLOOP_RULES_DB"])
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(token_keys))).all()
    finally:
        await engine.dispose()
    assert rows and all(row.secret is None for row in rows)
    for forged in _forgeries(token, rows)[:4]:
        refused = await api.http.post("/v1/messages", json=draft(composition_token=forged), headers=agent)
        assert refused.status_code == 422 and "composition_token" in refused.text, refused.text
    accepted = await api.http.post("/v1/messages", json=draft(composition_token=token), headers=agent)
    assert accepted.status_code in (200, 201, 202), accepted.text
