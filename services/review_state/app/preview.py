"""The exact message an approval delivers, before it is approved (issue 38): the console shows it, its
digest, and every part; a human's approval names the digest, and a decision whose message would hash
otherwise is refused ``stale``, so what a human approves is what goes out."""

from __future__ import annotations

from dataclasses import dataclass, replace

from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.storage import utcnow
from reviewloop.tenancy import Principal

from review_state import store
from review_state.app._kernel import not_found
from review_state.app.env import Env
from review_state.domain.decision import Decision
from review_state.domain.machine import Actor, Verb, allowed_actions
from review_state.domain.mime import approval_digest, message_of, rfc_message_id
from review_state.domain.review import Review


@dataclass(frozen=True)
class Preview:
    raw: bytes  # the wire bytes, with a placeholder Date and (before approval) Message-ID
    digest: str  # approval_digest(raw)
    review: Review  # the review as the approval would deliver it (the edit applied)
    html_regenerated: bool  # the edit's HTML part was regenerated from its text


def preview_of(review: Review, edit: Decision | None = None) -> Preview:
    """The message an approval of ``review`` (or of ``edit`` of it) delivers, built by the function the
    delivery worker calls."""
    candidate, regenerated = review, False
    if edit is not None:
        candidate = edit.edited(review)
        regenerated = edit.body_html is None and candidate.body_html != review.body_html
    stamped = replace(
        candidate,
        rfc_message_id=candidate.rfc_message_id or rfc_message_id(new_id("msg"), candidate.from_address),
    )
    raw = message_of(stamped, utcnow())
    return Preview(raw, approval_digest(raw), candidate, regenerated)


async def preview_message(
    env: Env,
    principal: Principal,
    review_id: str,
    subject: str | None = None,
    body: str | None = None,
    body_html: str | None = None,
) -> Preview:
    """``PreviewMessage``: nothing is written."""
    async with env.db.single_statement.connect() as conn:
        review = await store.get_review(conn, principal.project_id, review_id)
    if review is None:
        raise not_found(review_id)
    edit = None
    if subject is not None or body is not None or body_html is not None:
        edit = Decision("edit", review.revision, review.version, subject, body, body_html=body_html)
        edit.verb()  # the edit's own validation (one-line subject, ...)
    return preview_of(review, edit)


def check_seen(current: Review, decision: Decision, verb: Verb) -> None:
    """``stale`` unless the message this approve or edit would deliver hashes to the digest the human
    saw (``decision.message_sha256``; none named checks nothing)."""
    if not decision.message_sha256 or verb not in (Verb.APPROVE, Verb.EDIT):
        return
    preview = preview_of(current, decision if verb is Verb.EDIT else None)
    if preview.digest == decision.message_sha256:
        return
    raise DomainError(
        Code.STALE,
        f"The message this {decision.action} would deliver is not the one you saw: you saw sha256 "
        f"{decision.message_sha256[:16]}…, it is now {preview.digest[:16]}… (revision {current.revision}, "
        f"version {current.version}). Nothing was done; re-read the message and decide on what it is now.",
        state=current.state,
        revision=current.revision,
        version=current.version,
        allowed_actions=allowed_actions(current.state, Actor.HUMAN),
        hints=(("reason", "message_changed"), ("message_sha256", preview.digest)),
    )
