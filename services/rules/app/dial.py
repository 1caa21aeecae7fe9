"""The brand-risk dial (``domain.risk``): account defaults a project's console sets, per-category
overrides whose unset fields inherit them, and the values in force for one category."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store
from rules.app.authority import require
from rules.app.categories import load_category
from rules.app.env import Env
from rules.domain import risk


@dataclass(frozen=True)
class CategoryDial:
    category_id: str
    overrides: dict[str, Any]  # as the console wrote them; None = explicitly inherit
    effective: dict[str, Any]


@dataclass(frozen=True)
class Dial:
    account: dict[str, Any]
    categories: list[CategoryDial] = field(default_factory=list)


async def dial_for(conn: AsyncConnection, project_id: str, category_id: str) -> dict[str, Any]:
    """The dial values in force for one category of a project."""
    account = risk.account_in_force(await store.account_dial.read(conn, project_id))
    return risk.effective(
        account, (await store.overrides(conn, project_id, category_id)).get(category_id, {})
    )


async def get_risk_dial(env: Env, principal: Principal, category_id: str = "") -> Dial:
    """The account defaults in force and each overridden category's values (with ``category_id``,
    that category alone, overridden or not)."""
    async with env.db.engine.connect() as conn:
        return await _dial(conn, principal, category_id)


async def _dial(conn: AsyncConnection, principal: Principal, category_id: str) -> Dial:
    account = risk.account_in_force(await store.account_dial.read(conn, principal.project_id))
    if category_id:
        await load_category(conn, principal, category_id)
    written = await store.overrides(conn, principal.project_id, category_id)
    if category_id and category_id not in written:
        written[category_id] = {}
    return Dial(
        account,
        [CategoryDial(cid, values, risk.effective(account, values)) for cid, values in written.items()],
    )


async def set_risk_dial(
    env: Env,
    principal: Principal,
    *,
    account: Mapping[str, Any] | None,
    categories: Sequence[tuple[str, Mapping[str, Any]]],
) -> Dial:
    """Console: ``account`` fields merge (null returns one to the built-in default); each listed
    category's overrides are replaced (a null or absent field inherits)."""
    require(principal, (ActorKind.ADMIN,), "Setting the risk dial")
    checked_account = risk.validate(account, "/account") if account is not None else None
    checked = [(cid, risk.validate(values, f"/categories/{i}")) for i, (cid, values) in enumerate(categories)]
    async with env.db.transaction() as uow:
        if checked_account is not None:
            await store.account_dial.merge(uow.conn, principal.org_id, principal.project_id, checked_account)
        for cid, values in checked:
            await load_category(uow.conn, principal, cid)
            await store.save_overrides(uow.conn, principal.project_id, cid, values)
        dial = await _dial(uow.conn, principal, "")
        # The values in force after the change: a refusal rolls the whole change back.
        risk.check_panel(dial.account, "/account")
        listed = {cid: i for i, (cid, _) in enumerate(checked)}
        for category in dial.categories:
            at = listed.get(category.category_id)
            risk.check_panel(category.effective, f"/categories/{at}" if at is not None else "/account")
        return dial
