"""The shared-pool auto-send governor's rules (spec 000: the prerequisite before external users).

A *sending pool* is the From domain: every org and project that sends from it shares its reputation,
so the deployment bounds how many releases no human reviewed (auto-sends and direct releases) leave
each pool per UTC day. A release spends one unit with a receipt before it goes out; the receipt is
settled once, with the no-refund rules of review rounds (spec 003): a unit comes back only when the
send provably never happened (``not_sent``, like a no-verdict attempt); a delivered send is spent
(``sent``, like a counted verdict); a send whose outcome is unknown past DATA is kept (``kept``) and
never refunded (fail closed: the pool may under-spend, never over-spend). A kept receipt may still
become ``sent`` on evidence (as a late verdict settles a round), never ``refunded``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from reviewloop.errors import Code, DomainError, invalid

MAX_POOL_BUDGET = 10_000_000
# The deployment default per pool per UTC day when the operator names none.
DEFAULT_POOL_BUDGET = 2_000


class ReceiptStatus(StrEnum):
    CONSUMED = "consumed"  # spent, not settled yet (the delivery is under way)
    SENT = "sent"  # delivered: spent for good
    REFUNDED = "refunded"  # the send never happened: the unit came back
    KEPT = "kept"  # unknown outcome past DATA: spent for good unless evidence says sent


class Outcome(StrEnum):
    SENT = "sent"
    NOT_SENT = "not_sent"
    UNKNOWN = "unknown"


def sending_pool(sender: str) -> str:
    """The pool of a From address (or a bare domain): its domain, lowercased."""
    domain = sender.strip().rpartition("@")[2].strip().strip(">").lower().rstrip(".")
    if not domain or "." not in domain or any(c.isspace() for c in domain):
        raise invalid("/sender", "a sending pool is the From address's domain; name an address")
    return domain


@dataclass(frozen=True)
class PoolBudgets:
    """The deployment's budgets: one default, and per-pool overrides by the operator."""

    default: int = DEFAULT_POOL_BUDGET
    pools: Mapping[str, int] = field(default_factory=dict)

    def of(self, pool: str) -> int:
        return self.pools.get(pool, self.default)


def parse_budgets(default: str, overrides: str) -> PoolBudgets:
    """``REVIEWLOOP_AUTO_SEND_POOL_BUDGET`` (an integer) and ``..._POOL_BUDGETS`` (``domain=N`` items
    separated by commas or whitespace)."""

    def number(text: str, where: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{where}: {text!r} is not an integer") from None
        if not 0 <= value <= MAX_POOL_BUDGET:
            raise ValueError(f"{where}: {value} is not between 0 and {MAX_POOL_BUDGET}")
        return value

    pools: dict[str, int] = {}
    for item in overrides.replace(",", " ").split():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"REVIEWLOOP_AUTO_SEND_POOL_BUDGETS: {item!r} is not domain=N")
        pools[sending_pool(name)] = number(value, "REVIEWLOOP_AUTO_SEND_POOL_BUDGETS")
    base = number(default, "REVIEWLOOP_AUTO_SEND_POOL_BUDGET") if default else DEFAULT_POOL_BUDGET
    return PoolBudgets(base, pools)


def settled_status(current: ReceiptStatus, outcome: Outcome) -> ReceiptStatus | None:
    """The receipt's status after ``outcome``; None when it stays as it is (a repeat); a conflict when the
    outcome contradicts a final settlement (a refund of a spent unit, a send of a refunded one)."""
    wanted = {
        Outcome.SENT: ReceiptStatus.SENT,
        Outcome.NOT_SENT: ReceiptStatus.REFUNDED,
        Outcome.UNKNOWN: ReceiptStatus.KEPT,
    }[outcome]
    if current is wanted:
        return None
    if current is ReceiptStatus.CONSUMED or (current is ReceiptStatus.KEPT and wanted is ReceiptStatus.SENT):
        return wanted
    if current is ReceiptStatus.SENT and wanted is ReceiptStatus.KEPT:
        return None  # a late "unknown" after evidence of delivery changes nothing
    raise DomainError(
        Code.CONFLICT,
        f"This pool receipt is settled {current.value}; it cannot become {wanted.value} "
        "(a unit is refunded only when the send never happened, and never after it was spent).",
        hints=(("status", current.value),),
    )
