"""Who may do what, and who owns what.

Agents write project rules and categories; the console (admin keys, and humans where a human
reviewer may act) holds the rest. The gateway's console routes that name only a category or a
lineage learn here which org owns it.
"""

from __future__ import annotations

from collections.abc import Sequence

from reviewloop.errors import Code, DomainError
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from rules import store
from rules.app.env import Env
from rules.domain.ladder import Author

HUMAN_AUTHORITY = (ActorKind.ADMIN, ActorKind.HUMAN)

# Staged approval holds back what the reviewed parties write, never what a human writes.
STAGED_KINDS = (ActorKind.AGENT, ActorKind.REVIEW_AGENT)


# The SDK's author_kind is ``agent | human``: the console (and the platform acting on its authority) is a
# human acting; a review agent or a service is an agent. The exact kind stays in ``changed_by_kind``.
AGENT_AUTHORS = frozenset({ActorKind.AGENT, ActorKind.REVIEW_AGENT, ActorKind.SERVICE})


def author_kind(principal: Principal) -> str:
    return "agent" if principal.actor_kind in AGENT_AUTHORS else "human"


def author(principal: Principal, *, staged: bool = False) -> Author:
    """``principal`` as a lineage records its writer."""
    return Author(
        org_id=principal.org_id,
        project_id=principal.project_id,
        actor_kind=principal.actor_kind.value,
        actor_id=principal.actor_id,
        author_kind=author_kind(principal),
        staged=staged,
    )


async def writer(conn: AsyncConnection, principal: Principal) -> Author:
    """The author of a rule write, staged when the project's write_approval holds it back (the
    setting is read only for the kinds it can hold back)."""
    staged = principal.actor_kind in STAGED_KINDS and await store.write_approval(conn, principal.project_id)
    return author(principal, staged=staged)


def require(principal: Principal, kinds: Sequence[ActorKind], what: str) -> None:
    """Refuse ``what`` (``forbidden_scope``) unless the principal is one of ``kinds``."""
    if principal.actor_kind not in kinds:
        raise DomainError(
            Code.FORBIDDEN_SCOPE,
            f"{what} is human authority (a console action); a {principal.actor_kind} key cannot do it.",
        )


def require_house_style(principal: Principal) -> None:
    """Org house style is console authority: an admin key's, never a reviewer's or an agent's."""
    if principal.actor_kind is not ActorKind.ADMIN:
        raise DomainError(
            Code.FORBIDDEN_SCOPE,
            f"House style (the org's rules) is console authority and takes an admin key; a "
            f"{principal.actor_kind} key cannot write it. Save it for this project, category or agent instead.",
        )


async def resolve_owner(env: Env, *, category_id: str = "", lineage_id: str = "") -> tuple[str, str]:
    """The (org_id, project_id) that owns a category or a rule lineage."""
    async with env.db.engine.connect() as conn:
        owner = (
            await store.category_owner(conn, category_id)
            if category_id
            else await store.lineage_owner(conn, lineage_id)
        )
    if owner is None:
        raise DomainError(
            Code.NOT_FOUND, f"No {'category' if category_id else 'rule lineage'} {category_id or lineage_id}."
        )
    return owner
