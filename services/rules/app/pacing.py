"""Backlog pacing values (``domain.pacing``): a project setting the console authors and review_state
paces propagation nudges with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reviewloop.tenancy import ActorKind, Principal

from rules import store
from rules.app.authority import require
from rules.app.env import Env
from rules.domain import pacing


async def get_pacing_settings(env: Env, principal: Principal) -> dict[str, int]:
    """The project's pacing values in force (any key of the project reads them)."""
    async with env.db.engine.connect() as conn:
        return pacing.in_force(await store.pacing_values.read(conn, principal.project_id))


async def set_pacing_settings(
    env: Env, principal: Principal, values: Mapping[str, Any], clear: Sequence[str] = ()
) -> dict[str, int]:
    """Console: the named fields are set, the ``clear`` ones return to their defaults, others stay."""
    require(principal, (ActorKind.ADMIN,), "Setting backlog pacing")
    checked = pacing.validate({**values, **dict.fromkeys(clear)}, "/pacing")
    async with env.db.transaction() as uow:
        stored = await store.pacing_values.merge(uow.conn, principal.org_id, principal.project_id, checked)
    return pacing.in_force(stored)
