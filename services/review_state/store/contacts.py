"""What decides whether mail may go out: contact flags, the outbound count, the review policy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Row, bindparam, func, insert, null, select, text, union_all, update
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state.store.tables import (
    account_review_policies,
    composition_settings,
    contacts,
    idempotency_keys,
    messages,
    review_policies,
)


class Remembered(NamedTuple):
    """An Idempotency-Key's row, as a replay needs it."""

    request_hash: str
    review_id: str
    result_id: str


@dataclass(frozen=True)
class SendingFacts:
    """What decides whether mail may go to a set of recipients: their contact flags, the project's
    outbound count over the quota window and its stored review policy."""

    blocked: tuple[str, ...]
    suppressed: tuple[str, ...]
    uncontacted: tuple[str, ...]  # the recipients (lowercased) that never had mail from, nor wrote to, it
    sent_since: int
    policy: str | None  # the project's override
    account_policy: str | None  # its org's default
    require_composition_token: bool = False  # the project's composition setting
    remembered: Remembered | None = None  # the Idempotency-Key asked for with them, if it was used

    @property
    def first_contact(self) -> bool:
        return bool(self.uncontacted)


# One statement for both reads: the recipients' flag rows (``sent`` null), then the project's own row
# (its outbound count and review policies, ``address`` null). A round trip fewer per check than two.
_RECIPIENT_FLAGS = select(
    contacts.c.address,
    contacts.c.blocked,
    contacts.c.suppressed,
    contacts.c.contacted_at,
    null().label("sent"),
    null().label("policy"),
    null().label("account_policy"),
    null().label("require_token"),
).where(
    contacts.c.project_id == bindparam("project_id"),
    contacts.c.address.in_(bindparam("addresses", expanding=True)),
)


def _setting(column: Any, key: str, label: str) -> Any:
    """``column`` of the settings row whose ``key`` is the bound parameter of that name (null when there is
    none), as the scalar ``label``."""
    return select(column).where(column.table.c[key] == bindparam(key)).scalar_subquery().label(label)


_PROJECT_SENDING = select(
    null().label("address"),
    null().label("blocked"),
    null().label("suppressed"),
    null().label("contacted_at"),
    select(func.count())
    .select_from(messages)
    .where(
        messages.c.project_id == bindparam("project_id"),
        messages.c.direction == "outbound",
        messages.c.created_at >= bindparam("since"),
    )
    .scalar_subquery()
    .label("sent"),
    _setting(review_policies.c.policy, "project_id", "policy"),
    _setting(account_review_policies.c.policy, "org_id", "account_policy"),
    _setting(composition_settings.c.require_composition_token, "project_id", "require_token"),
)
_SENDING_FACTS = union_all(_RECIPIENT_FLAGS, _PROJECT_SENDING)


def _remembered(column: str) -> Any:
    return (
        select(idempotency_keys.c[column])
        .where(
            idempotency_keys.c.project_id == bindparam("project_id"),
            idempotency_keys.c.actor_id == bindparam("actor_id"),
            idempotency_keys.c.key == bindparam("key"),
        )
        .scalar_subquery()
        .label(f"key_{column}")
    )


# The same with what an Idempotency-Key remembers (nulls: never used), on the project's row: a keyed
# submit asks for its replay and its recipients' facts in one round trip.
_KEY_COLUMNS = ("request_hash", "review_id", "result_id")
_PROJECT_SENDING_KEYED = _PROJECT_SENDING.add_columns(*(_remembered(c) for c in _KEY_COLUMNS))
_SENDING_FACTS_KEYED = union_all(
    _RECIPIENT_FLAGS.add_columns(*(null().label(f"key_{c}") for c in _KEY_COLUMNS)), _PROJECT_SENDING_KEYED
)


async def sending_facts(
    conn: AsyncConnection,
    project_id: str,
    addresses: Sequence[str],
    since: datetime,
    org_id: str = "",
    key: tuple[str, str] | None = None,
) -> SendingFacts:
    """One statement (built once) for every check of a send: submit, revision, reviewer release,
    delivery. ``account_policy`` is read only when ``org_id`` is given (submit resolves the policy);
    ``key`` (an actor's Idempotency-Key) is read with them when given."""
    lowered = sorted({a.lower() for a in addresses})
    params = {"project_id": project_id, "org_id": org_id, "since": since}
    if key is not None:
        params |= {"actor_id": key[0], "key": key[1]}
    if lowered:
        statement = _SENDING_FACTS if key is None else _SENDING_FACTS_KEYED
        rows = (await conn.execute(statement, {**params, "addresses": lowered})).all()
    else:
        rows = (await conn.execute(_PROJECT_SENDING if key is None else _PROJECT_SENDING_KEYED, params)).all()
    project = next(r for r in rows if r.address is None)
    flags = [r for r in rows if r.address is not None]
    contacted = {r.address for r in flags if r.contacted_at is not None}
    return SendingFacts(
        blocked=tuple(r.address for r in flags if r.blocked),
        suppressed=tuple(r.address for r in flags if r.suppressed),
        uncontacted=tuple(a for a in lowered if a not in contacted),
        sent_since=int(project.sent or 0),
        policy=project.policy,
        account_policy=project.account_policy,
        require_composition_token=bool(project.require_token),
        remembered=(
            Remembered(project.key_request_hash, project.key_review_id, project.key_result_id)
            if key is not None and project.key_request_hash is not None
            else None
        ),
    )


async def contacted(conn: AsyncConnection, project_id: str, addresses: Sequence[str]) -> set[str]:
    """Which of ``addresses`` (lowercased) the project has mailed or heard from: one statement for a
    whole page of drafts' recipients, so a listing's first-contact badges cost one read however long."""
    lowered = sorted({a.lower() for a in addresses})
    if not lowered:
        return set()
    rows = await conn.execute(
        select(contacts.c.address).where(
            contacts.c.project_id == project_id,
            contacts.c.address.in_(lowered),
            contacts.c.contacted_at.is_not(None),
        )
    )
    return {r.address for r in rows}


# Built once, as text: SQLAlchemy never caches a dialect's INSERT ... ON CONFLICT (it compiled this one
# on every delivery). PostgreSQL and SQLite read the same upsert.
_CONTACTED = text(
    "INSERT INTO contacts (project_id, address, blocked, suppressed, contacted_at, updated_at) "
    "VALUES (:project_id, :address, false, false, :now, :now) "
    "ON CONFLICT (project_id, address) DO UPDATE "
    "SET contacted_at = excluded.contacted_at, updated_at = excluded.updated_at "
    "WHERE contacts.contacted_at IS NULL"
).bindparams(bindparam("now", type_=contacts.c.contacted_at.type))


async def mark_contacted(
    conn: AsyncConnection, project_id: str, addresses: Sequence[str], now: datetime
) -> None:
    """Mail went to ``addresses``: each is no longer a first contact (a new row, or ``contacted_at`` set
    where it was null; an earlier ``contacted_at`` stays). One execute for them all."""
    rows = [
        {"project_id": project_id, "address": address, "now": now}
        for address in sorted({a.lower() for a in addresses})
    ]
    if rows:
        await conn.execute(_CONTACTED, rows)


# --- the review policy and contacts ---------------------------------------------------------------


async def get_policy(conn: AsyncConnection, project_id: str) -> str | None:
    return (
        await conn.execute(select(review_policies.c.policy).where(review_policies.c.project_id == project_id))
    ).scalar()


async def get_account_policy(conn: AsyncConnection, org_id: str) -> str | None:
    return (
        await conn.execute(
            select(account_review_policies.c.policy).where(account_review_policies.c.org_id == org_id)
        )
    ).scalar()


async def set_account_policy(
    conn: AsyncConnection, org_id: str, policy: str, actor_id: str, now: datetime
) -> None:
    values = {"policy": policy, "updated_by": actor_id, "updated_at": now}
    updated = await conn.execute(
        update(account_review_policies).where(account_review_policies.c.org_id == org_id).values(**values)
    )
    if updated.rowcount == 0:
        await conn.execute(insert(account_review_policies).values(org_id=org_id, **values))


async def set_policy(
    conn: AsyncConnection, org_id: str, project_id: str, policy: str, actor_id: str, now: datetime
) -> None:
    updated = await conn.execute(
        update(review_policies)
        .where(review_policies.c.project_id == project_id)
        .values(policy=policy, updated_by=actor_id, updated_at=now)
    )
    if updated.rowcount == 0:
        await conn.execute(
            insert(review_policies).values(
                project_id=project_id, org_id=org_id, policy=policy, updated_by=actor_id, updated_at=now
            )
        )


@dataclass(frozen=True)
class Contact:
    address: str
    blocked: bool
    suppressed: bool
    blocked_at: datetime | None = None
    blocked_by: str = ""
    suppressed_at: datetime | None = None
    suppressed_by: str = ""


BLOCKED, SUPPRESSED = "blocked", "suppressed"


def _contact(row: Row[Any]) -> Contact:
    return Contact(
        row.address,
        row.blocked,
        row.suppressed,
        row.blocked_at,
        row.blocked_by or "",
        row.suppressed_at,
        row.suppressed_by or "",
    )


async def block_contact(
    conn: AsyncConnection, project_id: str, address: str, actor_id: str, now: datetime
) -> Contact:
    """Put ``address`` on the project's block list: no mail goes to it, at submit or at delivery."""
    return await _flag(conn, project_id, address, BLOCKED, actor_id, now)


async def suppress_contact(
    conn: AsyncConnection, project_id: str, address: str, actor_id: str, now: datetime
) -> Contact:
    """Record that ``address`` unsubscribed from the project's mail."""
    return await _flag(conn, project_id, address, SUPPRESSED, actor_id, now)


async def _flag(
    conn: AsyncConnection, project_id: str, address: str, flag: str, actor_id: str, now: datetime
) -> Contact:
    """Set ``flag`` on the address; a flag already set keeps its first ``_at`` and ``_by``."""
    address = address.lower()
    key = (contacts.c.project_id == project_id) & (contacts.c.address == address)
    at, by = contacts.c[f"{flag}_at"], contacts.c[f"{flag}_by"]
    updated = await conn.execute(
        update(contacts)
        .where(key)
        .values({flag: True, at: func.coalesce(at, now), by: func.coalesce(by, actor_id), "updated_at": now})
    )
    if updated.rowcount == 0:
        await conn.execute(
            insert(contacts).values(
                project_id=project_id,
                address=address,
                blocked=flag == BLOCKED,
                suppressed=flag == SUPPRESSED,
                **{f"{flag}_at": now, f"{flag}_by": actor_id},
                updated_at=now,
            )
        )
    return _contact((await conn.execute(select(contacts).where(key))).one())


async def unflag_contact(
    conn: AsyncConnection, project_id: str, address: str, flag: str, now: datetime
) -> Contact | None:
    """Take ``address`` off the ``flag`` list; None when it was not on it."""
    key = (contacts.c.project_id == project_id) & (contacts.c.address == address.lower())
    updated = await conn.execute(
        update(contacts)
        .where(key & contacts.c[flag].is_(True))
        .values({flag: False, f"{flag}_at": None, f"{flag}_by": None, "updated_at": now})
    )
    if updated.rowcount == 0:
        return None
    return _contact((await conn.execute(select(contacts).where(key))).one())


async def listed_contacts(conn: AsyncConnection, project_id: str) -> list[Contact]:
    """The project's blocked or suppressed recipients, by address."""
    rows = await conn.execute(
        select(contacts)
        .where(contacts.c.project_id == project_id, contacts.c.blocked | contacts.c.suppressed)
        .order_by(contacts.c.address)
    )
    return [_contact(row) for row in rows]


# --- the composition settings ----------------------------------------------------------------------


async def get_require_composition_token(conn: AsyncConnection, project_id: str) -> bool:
    return bool(
        await conn.scalar(
            select(composition_settings.c.require_composition_token).where(
                composition_settings.c.project_id == project_id
            )
        )
    )


async def set_require_composition_token(
    conn: AsyncConnection, org_id: str, project_id: str, required: bool, actor_id: str, now: datetime
) -> None:
    values = {"require_composition_token": required, "updated_by": actor_id, "updated_at": now}
    updated = await conn.execute(
        update(composition_settings).where(composition_settings.c.project_id == project_id).values(**values)
    )
    if updated.rowcount == 0:
        await conn.execute(
            insert(composition_settings).values(project_id=project_id, org_id=org_id, **values)
        )
