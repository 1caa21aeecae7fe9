"""Console verbs, the human authority an agent never has: recorded inbound mail, the review policy,
the block list and unsubscribe suppression."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime

from reviewloop.errors import Code, DomainError, FieldViolation, invalid
from reviewloop.ids import new_id
from reviewloop.storage import utcnow
from reviewloop.tenancy import Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from review_state import store
from review_state.app._kernel import require_admin
from review_state.app.env import Env
from review_state.domain.mime import rfc_message_id
from review_state.domain.submission import (
    ACCOUNT_DEFAULT,
    OVERRIDE,
    Policy,
    is_address,
    parse_policy,
    resolve_policy,
)


def _header(headers: Mapping[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "")


def _address_problems(from_address: str, to: list[str], cc: list[str]) -> list[FieldViolation]:
    problems = []
    if not is_address(from_address):
        problems.append(FieldViolation("/from", f"{from_address!r} is not an email address"))
    if not to:
        problems.append(FieldViolation("/to", "at least one recipient is required"))
    for name, addresses in (("to", to), ("cc", cc)):
        problems += [
            FieldViolation(f"/{name}/{i}", f"{a!r} is not an email address")
            for i, a in enumerate(addresses)
            if not is_address(a)
        ]
    return problems


async def record_inbound(
    env: Env,
    principal: Principal,
    *,
    from_address: str,
    to: list[str],
    cc: list[str],
    subject: str,
    body_text: str,
    headers: dict[str, str],
) -> store.Message:
    """Record a received message so replies and forwards have a parent; threads by In-Reply-To /
    References when they name a message this project knows."""
    require_admin(principal)
    problems = _address_problems(from_address, to, cc)
    if problems:
        raise DomainError(
            Code.BAD_REQUEST,
            "; ".join(f"{p.field}: {p.description}" for p in problems),
            violations=tuple(problems),
        )
    message_id = new_id("msg")
    rfc_id = _header(headers, "Message-ID") or rfc_message_id(message_id, from_address)
    references = " ".join(x for x in (_header(headers, "References"), _header(headers, "In-Reply-To")) if x)
    async with env.db.transaction() as uow:
        if _header(headers, "Message-ID"):
            # A provider webhook retries: the same Message-ID is the same message, recorded once.
            seen = await store.message_by_rfc_id(uow.conn, principal.project_id, rfc_id)
            if seen is not None and seen.direction == "inbound":
                return seen
        thread_ref = ""
        for ref in reversed(references.split()):
            known = await store.message_by_rfc_id(uow.conn, principal.project_id, ref)
            if known is not None:
                thread_ref = known.thread_ref
                break
        message = store.Message(
            id=message_id,
            org_id=principal.org_id,
            project_id=principal.project_id,
            direction="inbound",
            rfc_message_id=rfc_id,
            references_hdr=_header(headers, "References"),
            thread_ref=thread_ref or new_id("thread"),
            from_address=from_address,
            to=to,
            cc=cc,
            subject=subject,
            body_text=body_text,
            headers=headers,
            created_at=utcnow(),
        )
        store.add_message(uow, message)
        await store.mark_contacted(uow.conn, principal.project_id, [from_address], message.created_at)
    return message


async def get_policy(env: Env, principal: Principal) -> tuple[str, str, str, str]:
    """The policy in force and its source, then what the project's override and the org's account
    default each hold ("" where unset)."""
    async with env.db.engine.connect() as conn:
        override = await store.get_policy(conn, principal.project_id)
        account_default = await store.get_account_policy(conn, principal.org_id)
    policy, source = resolve_policy(override, account_default)
    return policy.value, source, override or "", account_default or ""


async def set_account_policy(env: Env, principal: Principal, policy: str) -> tuple[str, str]:
    """Console only: the org's default, which every project without its own override resolves to."""
    require_admin(principal)
    chosen: Policy = parse_policy(policy)
    async with env.db.transaction() as uow:
        await store.set_account_policy(uow.conn, principal.org_id, chosen.value, principal.actor_id, utcnow())
    return chosen.value, ACCOUNT_DEFAULT


async def set_policy(env: Env, principal: Principal, policy: str) -> tuple[str, str]:
    """Console only: an agent can never widen its own policy."""
    require_admin(principal)
    chosen: Policy = parse_policy(policy)
    async with env.db.transaction() as uow:
        await store.set_policy(
            uow.conn, principal.org_id, principal.project_id, chosen.value, principal.actor_id, utcnow()
        )
    return chosen.value, OVERRIDE


async def require_composition_token(env: Env, principal: Principal) -> bool:
    """Whether the project refuses a send, reply or forward that names no composition_token."""
    async with env.db.engine.connect() as conn:
        return await store.get_require_composition_token(conn, principal.project_id)


async def set_require_composition_token(env: Env, principal: Principal, required: bool) -> bool:
    """Console only: the project's composition setting (an agent can never loosen it)."""
    require_admin(principal)
    async with env.db.transaction() as uow:
        await store.set_require_composition_token(
            uow.conn, principal.org_id, principal.project_id, required, principal.actor_id, utcnow()
        )
    return required


async def add_block(env: Env, principal: Principal, address: str) -> store.Contact:
    """No mail goes to ``address`` from this project, at submit or at delivery."""
    return await _flag(env, principal, address, store.block_contact)


async def add_suppression(env: Env, principal: Principal, address: str) -> store.Contact:
    """``address`` unsubscribed from this project's mail."""
    return await _flag(env, principal, address, store.suppress_contact)


async def _flag(
    env: Env,
    principal: Principal,
    address: str,
    write: Callable[[AsyncConnection, str, str, str, datetime], Awaitable[store.Contact]],
) -> store.Contact:
    require_admin(principal)
    if not is_address(address):
        raise invalid("/address", f"{address!r} is not an email address")
    async with env.db.transaction() as uow:
        return await write(uow.conn, principal.project_id, address, principal.actor_id, utcnow())


async def list_contacts(env: Env, principal: Principal) -> list[store.Contact]:
    """The project's block and suppression lists, with who set each flag and since when."""
    require_admin(principal)
    async with env.db.engine.connect() as conn:
        return await store.listed_contacts(conn, principal.project_id)


async def remove_block(env: Env, principal: Principal, address: str) -> store.Contact:
    """Mail may go to ``address`` again (unless it is suppressed). Errors: ``not_found``."""
    return await _unflag(env, principal, address, "blocked")


async def remove_suppression(env: Env, principal: Principal, address: str) -> store.Contact:
    """``address`` may get this project's mail again (unless it is blocked). Errors: ``not_found``."""
    return await _unflag(env, principal, address, "suppressed")


async def _unflag(env: Env, principal: Principal, address: str, flag: str) -> store.Contact:
    require_admin(principal)
    if not is_address(address):
        raise invalid("/address", f"{address!r} is not an email address")
    async with env.db.transaction() as uow:
        contact = await store.unflag_contact(uow.conn, principal.project_id, address, flag, utcnow())
    if contact is None:
        raise DomainError(Code.NOT_FOUND, f"{address} is not {flag} in this project.")
    return contact
