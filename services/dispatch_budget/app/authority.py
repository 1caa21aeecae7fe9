"""Who may use the round budget (spec 003: "only the admission owner", "a service credential retains its
service identity"). Admissions, settlements, lineage leases and attempt journals belong to the reviewer
plane: review-agent keys and the owning service (a ``service`` key, or a ``system`` principal over
gRPC); a service keeps its service identity and never claims to be a person (extensions stay admin).
Run status belongs to admins and the owning service (a service key owns the runs it created),
extensions to admins. Composer (agent) and human keys read."""

from __future__ import annotations

from reviewloop.errors import Code, DomainError
from reviewloop.tenancy import ActorKind, Principal

REVIEWER_PLANE = frozenset({ActorKind.REVIEW_AGENT, ActorKind.SERVICE, ActorKind.SYSTEM})
RUN_OWNERS = frozenset({ActorKind.ADMIN, ActorKind.SERVICE, ActorKind.SYSTEM})
ADMINS = frozenset({ActorKind.ADMIN, ActorKind.SYSTEM})


def principal_ref(principal: Principal) -> str:
    """The admission owner as stored on a receipt: kind and id, so an id never matches across kinds."""
    return f"{principal.actor_kind.value}:{principal.actor_id}"


def _forbidden(principal: Principal, what: str, who: str) -> DomainError:
    return DomainError(
        Code.FORBIDDEN_SCOPE, f"{what} takes {who}; a {principal.actor_kind.value} key may not."
    )


def check_reviewer_plane(principal: Principal, what: str) -> None:
    if principal.actor_kind not in REVIEWER_PLANE:
        raise _forbidden(principal, what, "a review_agent key (the reviewer plane)")


def check_run_owner(principal: Principal, what: str) -> None:
    if principal.actor_kind not in RUN_OWNERS:
        raise _forbidden(principal, what, "an admin key or the owning service")


def check_owns_run(principal: Principal, what: str, run_id: str, owner: str) -> None:
    """A service key is the owning service only of the runs it created; an admin (or the in-process
    system principal) changes any run's status. A run from before owners were kept is an admin's."""
    check_run_owner(principal, what)
    if principal.actor_kind is ActorKind.SERVICE and owner != principal_ref(principal):
        raise DomainError(
            Code.FORBIDDEN_SCOPE,
            f"{what} takes an admin key or the service that created run {run_id}; this service key "
            "did not create it.",
        )


def check_admin(principal: Principal, what: str) -> None:
    if principal.actor_kind not in ADMINS:
        raise _forbidden(principal, what, "an admin key")


def check_settler(principal: Principal, receipt_id: str, admitted_by: str | None) -> None:
    """A settlement comes from the principal that admitted the receipt (review_state settles its own
    rounds as the review agent it admitted them for). A receipt admitted before owners were recorded
    is settled by the reviewer plane."""
    check_reviewer_plane(principal, "Settling a review attempt")
    if admitted_by and admitted_by != principal_ref(principal):
        raise DomainError(
            Code.FORBIDDEN_SCOPE,
            f"Receipt {receipt_id} was admitted by another principal; only its admission owner settles "
            f"it, not this {principal.actor_kind.value} key.",
        )
