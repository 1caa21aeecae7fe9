"""Submit-time rules of spec 000: draft shape, the review-policy table, reply / forward materialization,
and the gates of graduated auto-send and of the review-agent plane. Pure: no I/O."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from reviewloop.errors import Code, DomainError, FieldViolation, invalid

INTENT_SUMMARY_MIN, INTENT_SUMMARY_MAX = 8, 200
MAX_RECIPIENTS = 100
MAX_SUBJECT = 998  # RFC 5322's line limit
MAX_BODY = 2 * 1024 * 1024
MAX_ATTACHMENTS_BYTES = 10 * 1024 * 1024
MAX_HEADERS = 50
CHAT_MAX = 10_000

_ADDRESS = re.compile(r"^[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+$")
_HEADER_NAME = re.compile(r"^[!-9;-~]+$")  # RFC 5322 ftext: printable, no colon
_CONTENT_TYPE = re.compile(r"^[\w.+-]+/[\w.+-]+$")
# Headers the platform writes itself; a custom header may not forge them.
RESERVED_HEADERS = frozenset(
    h.lower()
    for h in (
        "From",
        "To",
        "Cc",
        "Bcc",
        "Subject",
        "Date",
        "Message-ID",
        "In-Reply-To",
        "References",
        "Reply-To",
        "MIME-Version",
        "Content-Type",
        "Content-Transfer-Encoding",
        "Content-Disposition",
    )
)


# The headers an agent may set on outgoing mail (issue 36): extension headers (``X-...``) and these.
# Everything else is the deployment's: a header that claims the sender's identity (Sender, Resent-*),
# the message's route (Return-Path, Received, Delivered-To) or its authentication (DKIM-Signature,
# ARC-*, Authentication-Results, Received-SPF) would let an agent forge what the relay and the
# recipient's filters trust, so it is refused (422 naming it), never dropped quietly.
AGENT_HEADER_NAMES = (
    "Comments",
    "Keywords",
    "Importance",
    "Priority",
    "Sensitivity",
    "Organization",
    "Content-Language",
    "Auto-Submitted",
    "Precedence",
    "List-Id",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
)
AGENT_HEADERS = frozenset(h.lower() for h in AGENT_HEADER_NAMES)
# An extension header whose name claims identity, routing or authentication is the deployment's too
# (X-Original-From, X-Sender, X-Forwarded-For, X-Originating-IP, X-Google-DKIM-Signature, ...).
_CLAIMING_EXTENSION = re.compile(
    r"sender|from|origin|received|return-path|resent|forward|envelope|deliver|auth|dkim|arc-|spf|dmarc"
    r"|signature|spam|verif|route|relay|ms-exchange|x-google",
    re.IGNORECASE,
)


def agent_may_set(name: str) -> bool:
    """Whether an agent may set header ``name`` on its outgoing mail (``AGENT_HEADERS``, or an extension
    header that claims nothing the deployment vouches for)."""
    lowered = name.lower()
    if lowered in AGENT_HEADERS:
        return True
    return lowered.startswith("x-") and not _CLAIMING_EXTENSION.search(lowered)


def is_address(value: str) -> bool:
    return bool(_ADDRESS.match(value))


@dataclass(frozen=True)
class Attachment:
    filename: str
    content_type: str
    content: bytes


@dataclass(frozen=True)
class Intent:
    """What the agent means the message to do: one sentence a reviewer reads first, and the free-form
    facts (``meta``, a JSON object) it attached."""

    summary: str
    meta: Mapping[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """The intent as the store and the idempotency hashes keep it (``meta`` only when given)."""
        body: dict[str, Any] = {"summary": self.summary}
        if self.meta is not None:
            body["meta"] = dict(self.meta)
        return body

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Intent | None:
        return None if value is None else cls(str(value.get("summary", "")), value.get("meta"))


@dataclass(frozen=True)
class Draft:
    to: Sequence[str]
    cc: Sequence[str]
    bcc: Sequence[str]
    subject: str
    body_text: str
    intent: Intent | None
    body_html: str | None = None
    reply_to: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    attachments: Sequence[Attachment] = ()

    @property
    def recipients(self) -> list[str]:
        """Everyone the message goes to: the envelope, Bcc included (as ``Review.recipients``)."""
        return [*self.to, *self.cc, *self.bcc]

    def fingerprint(self) -> dict[str, Any]:
        """The draft as plain JSON-able data, for idempotency hashes."""
        return {
            "to": list(self.to),
            "cc": list(self.cc),
            "bcc": list(self.bcc),
            "subject": self.subject,
            "body_text": self.body_text,
            "intent": self.intent.as_json() if self.intent else None,
            "body_html": self.body_html,
            "reply_to": self.reply_to,
            "headers": dict(self.headers),
            "attachments": [
                [a.filename, a.content_type, hashlib.sha256(a.content).hexdigest()] for a in self.attachments
            ],
        }


def validate_draft(draft: Draft) -> None:
    """Shape errors first (every bad field at once), so nothing is stored for a malformed draft."""
    problems: list[FieldViolation] = []
    if not draft.to:
        problems.append(FieldViolation("/to", "at least one recipient is required"))
    for name, addresses in (("to", draft.to), ("cc", draft.cc), ("bcc", draft.bcc)):
        if len(addresses) > MAX_RECIPIENTS:
            problems.append(FieldViolation(f"/{name}", f"at most {MAX_RECIPIENTS} addresses"))
        for i, address in enumerate(addresses):
            if not _ADDRESS.match(address):
                problems.append(FieldViolation(f"/{name}/{i}", f"{address!r} is not an email address"))
    if draft.reply_to is not None and not _ADDRESS.match(draft.reply_to):
        problems.append(FieldViolation("/reply_to", f"{draft.reply_to!r} is not an email address"))
    if len(draft.subject) > MAX_SUBJECT:
        problems.append(FieldViolation("/subject", f"at most {MAX_SUBJECT} characters"))
    if "\n" in draft.subject or "\r" in draft.subject:
        problems.append(FieldViolation("/subject", "must be one line"))
    if len(draft.body_text.encode()) > MAX_BODY:
        problems.append(FieldViolation("/body_text", f"at most {MAX_BODY} bytes"))
    if draft.body_html is not None and len(draft.body_html.encode()) > MAX_BODY:
        problems.append(FieldViolation("/body_html", f"at most {MAX_BODY} bytes"))
    if len(draft.headers) > MAX_HEADERS:
        problems.append(FieldViolation("/headers", f"at most {MAX_HEADERS} headers"))
    for name, value in draft.headers.items():
        if not _HEADER_NAME.match(name) or len(name) > 76:
            problems.append(FieldViolation(f"/headers/{name}", "not a valid header name"))
        elif name.lower() in RESERVED_HEADERS:
            problems.append(
                FieldViolation(f"/headers/{name}", "is set by the platform; use the field instead")
            )
        elif not agent_may_set(name):
            problems.append(
                FieldViolation(
                    f"/headers/{name}",
                    f"{name} is not a header an agent may set: identity, routing and authentication "
                    "headers are the deployment's (an agent may set X-* extension headers that claim "
                    "none of these, and " + ", ".join(AGENT_HEADER_NAMES) + ")",
                )
            )
        if "\n" in value or "\r" in value or len(value) > MAX_SUBJECT:
            problems.append(FieldViolation(f"/headers/{name}", "value must be one line of at most 998 chars"))
    total = 0
    for i, attachment in enumerate(draft.attachments):
        total += len(attachment.content)
        if not attachment.filename or "/" in attachment.filename or "\\" in attachment.filename:
            problems.append(FieldViolation(f"/attachments/{i}/filename", "a plain file name is required"))
        if not _CONTENT_TYPE.match(attachment.content_type):
            problems.append(FieldViolation(f"/attachments/{i}/content_type", "must look like type/subtype"))
    if total > MAX_ATTACHMENTS_BYTES:
        problems.append(FieldViolation("/attachments", f"at most {MAX_ATTACHMENTS_BYTES} bytes in total"))
    if problems:
        raise DomainError(
            Code.BAD_REQUEST,
            "; ".join(f"{p.field}: {p.description}" for p in problems),
            violations=tuple(problems),
        )


def check_intent(intent: Intent) -> None:
    summary = intent.summary.strip()
    if not INTENT_SUMMARY_MIN <= len(summary) <= INTENT_SUMMARY_MAX:
        raise invalid(
            "/intent/summary",
            f"must be one sentence of {INTENT_SUMMARY_MIN}-{INTENT_SUMMARY_MAX} characters "
            f"(got {len(summary)}); nothing was sent and nothing was queued",
            Code.INTENT_REQUIRED,
        )


def require_intent(intent: Intent | None, policy: str = "require_review", source: str = "floor") -> None:
    """Where the resolved mode is review, every message carries an intent whose summary is one sentence.
    The ``policy`` hint says which policy asked for it and where that policy came from."""
    if intent is None:
        raise DomainError(
            Code.INTENT_REQUIRED,
            f'This project\'s review policy is {policy}, so the request needs an "intent": '
            '{"summary": "<one sentence for the reviewer, 8-200 characters>", "meta": {...}}. '
            "Nothing was sent and nothing was queued; resubmit with an intent.",
            violations=(FieldViolation("/intent", f"required under the {policy} policy"),),
            hints=(("policy", f"{policy} (source: {source})"),),
        )
    check_intent(intent)


# --- the review policy ------------------------------------------------------------------------


class Policy(StrEnum):
    REQUIRE_REVIEW = "require_review"
    ALLOW_DIRECT = "allow_direct"
    AUTO_SEND_GRADUATED = "auto_send_graduated"


FLOOR = Policy.REQUIRE_REVIEW


class Route(StrEnum):
    QUEUE = "queue"  # a human (or linked review agent) decides
    DIRECT = "direct"  # released immediately: agent_direct
    AUTO_CANDIDATE = "auto_candidate"  # auto-sent if the category is graduated and every gate passes


# The spec's table "Where a review comes from": (policy, carries an intent) -> route; None = 422.
POLICY_TABLE: dict[tuple[Policy, bool], Route | None] = {
    (Policy.REQUIRE_REVIEW, True): Route.QUEUE,
    (Policy.REQUIRE_REVIEW, False): None,
    (Policy.ALLOW_DIRECT, True): Route.QUEUE,
    (Policy.ALLOW_DIRECT, False): Route.DIRECT,
    (Policy.AUTO_SEND_GRADUATED, True): Route.AUTO_CANDIDATE,
    (Policy.AUTO_SEND_GRADUATED, False): None,
}


# Where the effective policy came from, as the spec names it.
OVERRIDE, ACCOUNT_DEFAULT, FLOOR_SOURCE = "override", "account default", "floor"


def resolve_policy(project_override: str | None, account_default: str | None = None) -> tuple[Policy, str]:
    """The project's override, then the account default, then the require_review floor; with its source."""
    if project_override:
        return Policy(project_override), OVERRIDE
    if account_default:
        return Policy(account_default), ACCOUNT_DEFAULT
    return FLOOR, FLOOR_SOURCE


MODES = ("review", "direct")


@dataclass(frozen=True)
class Asked:
    """What a submit asks beyond its draft: the mode (the SDK's ``review`` | ``direct``), the sending
    inbox (the From address), and for a reply the thread it answers, whether to reply to all, what
    the agent read of the thread (``expected_*``: a thread that moved since is refused), and whether it
    means a second reply while one is pending (``second_reply``)."""

    mode: str = ""
    inbox: str = ""
    thread_id: str = ""
    reply_all: bool = False
    expected_context_version: str = ""
    expected_last_message_id: str = ""
    # The agent means a second reply while one to the thread is still pending (else 409
    # reply_already_pending names the pending one).
    second_reply: bool = False

    def validate(self) -> None:
        if self.mode not in ("", *MODES):
            raise invalid("/mode", f"must be one of {', '.join(MODES)}")
        if self.inbox and not is_address(self.inbox):
            raise invalid("/inbox", f"{self.inbox!r} is not an email address")


def route_for(policy: Policy, intent: Intent | None, source: str = FLOOR_SOURCE, mode: str = "") -> Route:
    """The policy table, refined by the mode the agent asked for (the SDK's ``mode``). The policy wins:
    ``review`` always queues (and, being review, needs an intent); ``direct`` is honoured only under
    ``allow_direct``, the one policy that sends without review, and elsewhere reads as no mode at all (a
    direct request under ``require_review`` is queued or refused ``intent_required``; under
    ``auto_send_graduated`` it stays an auto-send candidate, held by every gate and the daily cap)."""
    if mode == "review":
        require_intent(intent, policy.value, source)
        return Route.QUEUE
    if mode == "direct" and policy is Policy.ALLOW_DIRECT:
        if intent is not None:
            check_intent(intent)
        return Route.DIRECT
    route = POLICY_TABLE[(policy, intent is not None)]
    if route is None:
        require_intent(intent, policy.value, source)
        raise AssertionError("unreachable")  # pragma: no cover
    if intent is not None:
        check_intent(intent)
    return route


def parse_policy(value: str) -> Policy:
    try:
        return Policy(value)
    except ValueError:
        raise invalid("/policy", f"must be one of {', '.join(p.value for p in Policy)}") from None


# --- reply and forward materialization ---------------------------------------------------------


@dataclass(frozen=True)
class Parent:
    """A recorded message (inbound, or one we sent) that a reply or forward names."""

    message_id: str
    rfc_message_id: str
    references: str
    thread_ref: str
    from_address: str
    to: Sequence[str]
    cc: Sequence[str]
    subject: str
    body_text: str
    created_at: datetime
    reply_to: str | None = None
    # One we sent: its From and Reply-To are our own addresses.
    outbound: bool = False


_RE = re.compile(r"^\s*re\s*:\s*", re.IGNORECASE)
_FWD = re.compile(r"^\s*(fwd?|fw)\s*:\s*", re.IGNORECASE)


def reply_subject(subject: str) -> str:
    """``Re: <subject>``, never ``Re: Re:``."""
    while _RE.match(subject):
        subject = _RE.sub("", subject, count=1)
    return f"Re: {subject}"


def forward_subject(subject: str) -> str:
    while _FWD.match(subject):
        subject = _FWD.sub("", subject, count=1)
    return f"Fwd: {subject}"


def quoted_forward(parent: Parent) -> str:
    when = parent.created_at.strftime("%a, %d %b %Y %H:%M:%S +0000")
    lines = [
        "---------- Forwarded message ---------",
        f"From: {parent.from_address}",
        f"Date: {when}",
        f"Subject: {parent.subject}",
        f"To: {', '.join(parent.to)}",
    ]
    if parent.cc:
        lines.append(f"Cc: {', '.join(parent.cc)}")
    return "\n".join(lines) + "\n\n" + parent.body_text


@dataclass(frozen=True)
class Threading:
    """How the delivered message threads: a reply's In-Reply-To / References; a forward's nothing."""

    thread_ref: str | None
    in_reply_to: str | None
    references: str | None


def materialize(
    kind: str, draft: Draft, parent: Parent | None, *, reply_all: bool = False, inbox: str = ""
) -> tuple[Draft, Threading]:
    """The exact draft the human reviews: a reply's Re: subject and recipients, a forward's subject
    and quoted parent body. A forward is not threaded to its parent. ``reply_all`` adds the parent's
    other recipients to a reply's Cc, never ``inbox`` (our own address) nor one already addressed; an
    explicit ``to`` replaces every derived recipient."""
    if kind == "send" or parent is None:
        return draft, Threading(None, None, None)
    if kind == "reply":
        to, cc = list(draft.to), list(draft.cc)
        if not to and parent.outbound:  # a follow-up to our own message goes to its recipients
            to, cc = list(parent.to), cc or list(parent.cc)
        elif not to:
            to = [parent.reply_to or parent.from_address]
            if reply_all:
                cc += [a for a in (*parent.to, *parent.cc) if a.lower() != inbox.lower()]
        cc = _unique(cc, exclude=to)
        subject = reply_subject(draft.subject or parent.subject)
        references = " ".join(x for x in (parent.references, parent.rfc_message_id) if x)
        threading = Threading(parent.thread_ref, parent.rfc_message_id, references)
        return _replace(draft, to=to, cc=cc, subject=subject), threading
    subject = forward_subject(draft.subject or parent.subject)
    body = (draft.body_text + "\n\n" if draft.body_text else "") + quoted_forward(parent)
    return _replace(draft, subject=subject, body_text=body), Threading(None, None, None)


def _unique(addresses: Sequence[str], exclude: Sequence[str]) -> list[str]:
    """``addresses`` once each (case-insensitively), without those in ``exclude``."""
    seen = {a.lower() for a in exclude}
    kept = []
    for address in addresses:
        if address.lower() not in seen:
            seen.add(address.lower())
            kept.append(address)
    return kept


@dataclass(frozen=True)
class ThreadContext:
    """What a thread is now: its context version (how many messages it holds: a message only ever
    joins a thread) and its newest message."""

    thread_id: str
    context_version: str
    last_message_id: str


def check_reply_context(
    thread: ThreadContext, expected_context_version: str, expected_last_message_id: str
) -> None:
    """A reply composed against a thread that has moved since (a new message arrived or went out) is
    ``409 reply_context_changed``: the agent re-reads the thread and recomposes; nothing is written."""
    moved = (expected_context_version and expected_context_version != thread.context_version) or (
        expected_last_message_id and expected_last_message_id != thread.last_message_id
    )
    if moved:
        raise DomainError(
            Code.REPLY_CONTEXT_CHANGED,
            f"Thread {thread.thread_id} moved since you read it: it is at context_version "
            f"{thread.context_version} and its last message is {thread.last_message_id}. Nothing was "
            "queued: re-read the thread, reconsider the reply, and resubmit with the new values.",
            hints=(
                ("thread_id", thread.thread_id),
                ("context_version", thread.context_version),
                ("last_message_id", thread.last_message_id),
            ),
        )


def _replace(draft: Draft, **changes: Any) -> Draft:
    return Draft(**{**draft.__dict__, **changes})


# --- the gates ------------------------------------------------------------------------------

GRADUATED = frozenset({"auto_notify", "auto_silent"})
# The turn an auto-send in an ``auto_notify`` category leaves for the project's humans (``auto_silent``
# leaves none): what the console's queue of auto-sent mail lists.
HUMANS_NOTIFIED = "humans_notified"


def notifies_humans(category_state: str) -> bool:
    return category_state == "auto_notify"


@dataclass(frozen=True)
class Dial:
    """The effective risk-dial values the gates read."""

    min_confidence: float
    first_contact_gate: bool
    canary_rate: float
    auto_send_cap_per_day: int
    quorum_approvals: int = 1  # distinct approvals of the current revision a release needs
    quorum_review_agent: bool = False  # a review agent's approval counts as one
    review_deadline_minutes: int = 0  # a review agent's time to decide (0: no deadline)
    quorum_panel: int = 0  # at most this many distinct humans decide a draft (0: any number)


def canary_draw(review_id: str) -> float:
    """A stable draw in [0, 1) per review, so a retry never re-rolls the canary."""
    return int(hashlib.sha256(review_id.encode()).hexdigest()[:8], 16) / 2**32


def breaker(*, dial: Dial, confidence: float | None, first_contact: bool, review_id: str) -> str | None:
    """The first circuit breaker that trips, by name, or None: low confidence below the dial's
    ``min_confidence``, a first contact under ``first_contact_gate``, then the canary sample."""
    if confidence is None or confidence < dial.min_confidence:
        return "low_confidence"
    if first_contact and dial.first_contact_gate:
        return "first_contact"
    if dial.canary_rate > 0 and canary_draw(review_id) < dial.canary_rate:
        return "canary"
    return None


def auto_send_hold(
    *,
    category_id: str,
    category_state: str | None,
    never_graduate: bool,
    dial: Dial | None,
    confidence: float | None,
    first_contact: bool,
    review_id: str,
) -> str | None:
    """Why a graduated auto-send is held (``held:<reason>``), or None when every gate passes."""
    if not category_id:
        return "no_category"
    if never_graduate:
        return "never_graduate"
    if category_state not in GRADUATED:
        return "not_graduated"
    assert dial is not None
    return breaker(dial=dial, confidence=confidence, first_contact=first_contact, review_id=review_id)
