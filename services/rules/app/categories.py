"""The category registry: agents create categories, the console edits and locks them.

A category is ``org_shared`` (every project of the org sees it) or ``project``; names are unique
among what a project sees, compared normalized.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reviewloop.errors import Code, DomainError, invalid
from reviewloop.ids import has_prefix, new_id
from reviewloop.rules.v1.events_pb2 import BroadcastRequested
from reviewloop.storage import UnitOfWork, utcnow
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store
from rules.app.authority import author_kind, require
from rules.app.env import NUDGE, Env, idempotent
from rules.domain.graduation import Rung as Grad
from rules.domain.guardrails import normalize
from rules.domain.ladder import Scope
from rules.store import CategoryRow

LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200
CATEGORY_SCOPES = ("org_shared", "project")
MAX_NAME_CHARS, MAX_DESCRIPTION_CHARS = 200, 2000


@dataclass(frozen=True)
class CategoryView:
    row: CategoryRow
    rule_high_water: int
    rules_version: int


def _category_not_found(category_id: str) -> DomainError:
    return DomainError(Code.NOT_FOUND, f"No category {category_id} is visible to this key.")


async def _category_views(
    conn: AsyncConnection, principal: Principal, rows: list[CategoryRow]
) -> list[CategoryView]:
    """Each category with its rule counters as this project sees them (category rules are
    project-layer, so an org-shared category's counters are per project)."""
    revisions = await store.revisions_on_ladder(conn, principal.org_id, principal.project_id)
    views = []
    for row in rows:
        moved = [
            r.high_water
            for r in revisions
            if r.high_water and r.scope is Scope.CATEGORY and r.category_id == row.id
        ]
        views.append(CategoryView(row, max(moved, default=0), len(moved)))
    return views


async def load_category(conn: AsyncConnection, principal: Principal, category_id: str) -> CategoryRow:
    """The category if the principal's project sees it, else ``not_found``."""
    row = await store.get_category(conn, principal.org_id, principal.project_id, category_id)
    if row is None:
        raise _category_not_found(category_id)
    return row


async def check_category(conn: AsyncConnection, principal: Principal, category_id: str) -> None:
    """``not_found`` unless the principal's project sees ``category_id``: the refusal a rule read or
    write names, which tells how to get a category."""
    row = await store.get_category(conn, principal.org_id, principal.project_id, category_id)
    if row is None:
        raise DomainError(
            Code.NOT_FOUND,
            f"No category {category_id} is visible to this key; list_categories, or create it first.",
        )
    if row.merged_into:
        raise DomainError(
            Code.CONFLICT,
            f"Category {category_id} was merged into {row.merged_into}; use that one.",
            hints=(("merged_into", row.merged_into),),
        )


def broadcast_category_moved(
    uow: UnitOfWork, row: CategoryRow, reason: str, *, state: str = "", name: str = "", into: str = ""
) -> None:
    """Tell every agent the category can route to (``recheck_category``, a broadcast: it reaches agents with
    no draft pending) that it moved: its rung, its name or description, or a merge into ``into``. An
    org-shared category's broadcast names no project (every project of the org sees the category)."""
    moved = BroadcastRequested.CategoryMoved(
        category_id=row.id, state=state or row.state.value, reason=reason
    )
    if name:
        moved.name = name
    if into:
        moved.into_category_id = into
    uow.emit(
        NUDGE,
        row.org_id,
        "broadcast",
        BroadcastRequested(
            org_id=row.org_id,
            project_id="" if row.scope == "org_shared" else row.project_id,
            category_id=row.id,
            recheck_category=moved,
        ),
    )


def _checked_name(name: str) -> str:
    name = " ".join(name.split())
    if not name or len(name) > MAX_NAME_CHARS:
        raise invalid("/name", f"must be 1 to {MAX_NAME_CHARS} characters")
    return name


def _check_description(description: str) -> None:
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise invalid("/description", f"must be at most {MAX_DESCRIPTION_CHARS} characters")


async def create_category(
    env: Env,
    principal: Principal,
    *,
    name: str,
    description: str,
    scope: str,
    never_graduate: bool,
    idempotency_key: str = "",
) -> CategoryView:
    name = _checked_name(name)
    _check_description(description)
    scope = scope or "org_shared"
    if scope not in CATEGORY_SCOPES:
        raise invalid("/scope", "must be org_shared or project")

    async def act(uow: UnitOfWork) -> str:
        await store.bump_high_water(uow.conn, principal.org_id)  # the org's write lock: names stay unique
        taken = await store.category_named(uow.conn, principal.org_id, principal.project_id, normalize(name))
        if taken is not None:
            raise DomainError(
                Code.CONFLICT,
                f"Category {taken.id} is already named {taken.name!r}; use it rather than a twin.",
                hints=(("category_id", taken.id),),
            )
        now = utcnow()
        row = CategoryRow(
            id=new_id("cat"),
            org_id=principal.org_id,
            project_id=principal.project_id,
            scope=scope,
            name=name,
            description=description.strip(),
            state=Grad.SUPERVISED,
            author_kind=author_kind(principal),
            never_graduate=never_graduate,
            clean_approval_count=0,
            drift_count=0,
            version=1,
            created_at=now,
            state_changed_at=now,
            updated_at=now,
            created_by_agent_id=principal.actor_id if principal.actor_kind is ActorKind.AGENT else "",
        )
        await store.add_category(uow.conn, row, normalize(name))
        return row.id

    fields = {"verb": "create_category", "name": name, "description": description, "scope": scope}
    category_id = await idempotent(env, principal, idempotency_key, {**fields, "ng": never_graduate}, act)
    return await get_category(env, principal, category_id)


async def get_category(env: Env, principal: Principal, category_id: str) -> CategoryView:
    async with env.db.engine.connect() as conn:
        row = await load_category(conn, principal, category_id)
        return (await _category_views(conn, principal, [row]))[0]


async def update_category(
    env: Env,
    principal: Principal,
    category_id: str,
    *,
    name: str | None,
    description: str | None,
    never_graduate: bool | None,
) -> CategoryView:
    """Display metadata (an agent may rename or redescribe, as it may create) and the never_graduate
    lock (console only)."""
    require(principal, (ActorKind.ADMIN, ActorKind.AGENT), "Editing a category")
    if never_graduate is not None:
        require(principal, (ActorKind.ADMIN,), "The never_graduate lock")
    changes: dict[str, Any] = {}
    if name is not None:
        name = _checked_name(name)
        changes.update(name=name, normalized_name=normalize(name))
    if description is not None:
        _check_description(description)
        changes["description"] = description.strip()
    if never_graduate is not None:
        changes["never_graduate"] = never_graduate
    async with env.db.transaction() as uow:
        row = await load_category(uow.conn, principal, category_id)
        if name is not None:
            taken = await store.category_named(
                uow.conn, principal.org_id, principal.project_id, normalize(name)
            )
            if taken is not None and taken.id != row.id:
                raise DomainError(
                    Code.CONFLICT,
                    f"Category {taken.id} is already named {taken.name!r}.",
                    hints=(("category_id", taken.id),),
                )
        if changes and not await store.compare_and_set_category(uow.conn, row, **changes):
            raise DomainError(Code.STALE, "The category changed at the same moment; re-read it and retry.")
        # A new name or description changes which drafts belong here: every agent rechecks.
        if name is not None and name != row.name:
            broadcast_category_moved(uow, row, "renamed", name=name)
        elif description is not None and description.strip() != row.description:
            broadcast_category_moved(uow, row, "redescribed", name=row.name)
    return await get_category(env, principal, category_id)


async def list_categories(
    env: Env, principal: Principal, *, cursor: str, limit: int
) -> tuple[list[CategoryView], str]:
    if limit < 0 or limit > LIST_LIMIT_MAX:
        raise invalid("/limit", f"must be between 1 and {LIST_LIMIT_MAX}")
    limit = limit or LIST_LIMIT_DEFAULT
    if cursor and not has_prefix(cursor, "cat"):
        raise invalid("/cursor", "is not one this service issued; pass next_cursor as given")
    async with env.db.engine.connect() as conn:
        rows = await store.list_categories(conn, principal.org_id, principal.project_id, cursor, limit + 1)
        views = await _category_views(conn, principal, rows[:limit])
    return views, (rows[limit - 1].id if len(rows) > limit else "")


async def count_categories(env: Env, principal: Principal) -> int:
    """Every category ``list_categories`` pages through (the SDK's ``Page.total``)."""
    async with env.db.engine.connect() as conn:
        return await store.count_categories(conn, principal.org_id, principal.project_id)
