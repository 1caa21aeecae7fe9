"""The composer's verbs: send, reply, forward, redraft, restamp, chat and cancel (what an agent sends)."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AliasChoices,
    AwareDatetime,
    Field,
    JsonValue,
)

from reviewloop.shapes._base import (
    INT32_MAX,
    INT64_MAX,
    MAX_BODY_TEXT,
    Address,
    Addresses,
    ReviewModeName,
    Shape,
    Storable,
    StructValue,
)

# --- reviews: the composer's verbs ------------------------------------------------------------------


# A composer's parent_revision is also the front_run_next nudge's int32 ``your_parent_revision`` (the
# nudge a verb on a closed review leaves), so it is bounded there, far above any revision a review reaches.
MAX_REVISION = INT32_MAX
# The approval digest: hex sha256 of the exact MIME message an approval delivers, without its Date and
# Message-ID fields (stamped when it goes out).
MessageSha256 = Annotated[str, Field(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$")]


class ReviewIntent(Shape):
    """One sentence (8-200 characters) for the reviewer; required when the resolved mode is review."""

    summary: str = Field(max_length=2000, examples=["Re-engage cold lead at Acme about Q3 pilot"])
    meta: Annotated[dict[str, JsonValue], Storable, StructValue] | None = None


class AttachmentIn(Shape):
    """An attachment a draft carries, its content base64-encoded."""

    filename: str = Field(min_length=1, max_length=255)
    content_type: str = Field(min_length=3, max_length=255)
    content_base64: str = Field(
        pattern=r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
        description="standard base64, padded",
    )


# The SDK's request names (``text``, ``html``, ``category_confidence``) are the advertised ones; the
# spec's own (``body_text``, ``body_html``, ``confidence``) keep working. Sending both is a 422.
TEXT = AliasChoices("text", "body_text")
HTML = AliasChoices("html", "body_html")
CONFIDENCE = AliasChoices("category_confidence", "confidence")


class _Composed(Shape):
    """What every outbound verb may carry besides its recipients and subject."""

    cc: Addresses = Field(default_factory=list, max_length=100)
    bcc: Addresses = Field(default_factory=list, max_length=100)
    body_text: str = Field(max_length=MAX_BODY_TEXT, validation_alias=TEXT)
    body_html: str | None = Field(default=None, max_length=MAX_BODY_TEXT, validation_alias=HTML)
    reply_to: Address | None = None
    headers: dict[str, str] | None = Field(default=None, max_length=50)
    attachments: list[AttachmentIn] | None = Field(default=None, max_length=20)
    intent: ReviewIntent | None = None
    category_id: str | None = Field(default=None, max_length=40)
    confidence: float | None = Field(default=None, ge=0, le=1, validation_alias=CONFIDENCE)
    composition_token: str | None = Field(default=None, max_length=4096)
    mode: ReviewModeName | None = Field(
        default=None,
        description="review: queue it; direct: send unreviewed where the policy allows (see effective_mode)",
    )
    inbox: Address | None = Field(
        default=None,
        description="the sending identity (From); default: the parent's inbox, else the project's",
    )


class SendIn(_Composed):
    """``send_email``: a new outbound message to ``to``."""

    to: Addresses = Field(min_length=1, max_length=100)
    subject: str = Field(max_length=998)


class ThreadReplyIn(_Composed):
    """A reply: its recipients and Re: subject are materialized from the message replied to.

    ``to``, when given, replaces the derived recipients (``reply_all`` included).
    """

    to: Addresses = Field(default_factory=list, max_length=100)
    subject: str = Field(default="", max_length=998)
    reply_all: bool = Field(
        default=False, description="also to the parent's other recipients (Cc), never your own inbox"
    )
    expected_context_version: str | None = Field(
        default=None,
        min_length=1,
        max_length=32,
        description="the thread's context_version you read; a thread that moved since is 409 "
        "reply_context_changed (re-read it and recompose)",
    )
    expected_last_message_id: str | None = Field(
        default=None, min_length=1, max_length=40, description="the thread's last_message_id you read"
    )
    second_reply: bool = Field(
        default=False,
        description="true: you mean a second reply while one to this thread is still pending (not yet sent, "
        "cancelled or failed); without it such a reply is 409 reply_already_pending naming the pending review",
    )


class ReplyIn(ThreadReplyIn):
    """A reply to a recorded message; ``thread_id``, when given, must be that message's thread."""

    thread_id: str | None = Field(default=None, min_length=1, max_length=40)


class ForwardIn(_Composed):
    """A forward's subject and quoted parent body are materialized; ``text`` is your note above it."""

    to: Addresses = Field(min_length=1, max_length=100)
    subject: str = Field(default="", max_length=998)
    body_text: str = Field(default="", max_length=MAX_BODY_TEXT, validation_alias=TEXT)


class CancelIn(Shape):
    """``cancel_review``: withdraw the draft; ``parent_revision``, when sent, must be the current one."""

    parent_revision: int | None = Field(default=None, ge=1, le=MAX_REVISION)


class SubmitRevisionRequest(Shape):
    """A redraft: omitted fields keep the draft's value; ``attachments: []`` clears them.

    ``parent_revision`` is the compare-and-set; ``version`` (optional) a second one, on the row's version.
    The composition is named by ``composition_token`` or by ``rules_version_seen`` (the ``rule_high_water``
    ``get_rules`` reported): one older than the stack's is ``409 born_stale``.
    """

    parent_revision: int = Field(ge=1, le=MAX_REVISION)
    version: int | None = Field(default=None, ge=1, le=INT64_MAX, description="the row version you read")
    rules_version_seen: int | None = Field(
        default=None, ge=0, le=INT64_MAX, description="the rule_high_water of the rules you redrafted against"
    )
    recheck_through_seq: int | None = Field(
        default=None, ge=1, le=INT64_MAX, description="the highest recheck nudge seq this redraft handled"
    )
    built_at: AwareDatetime | None = Field(
        default=None,
        description="when you built the redraft (accepted; the rule high-water decides born_stale)",
    )
    to: Addresses | None = Field(default=None, min_length=1, max_length=100)
    cc: Addresses | None = Field(default=None, max_length=100)
    bcc: Addresses | None = Field(default=None, max_length=100)
    subject: str | None = Field(default=None, max_length=998)
    body_text: str | None = Field(
        default=None, max_length=MAX_BODY_TEXT, validation_alias=AliasChoices("text", "body_text", "body")
    )
    body_html: str | None = Field(default=None, max_length=MAX_BODY_TEXT, validation_alias=HTML)
    reply_to: Address | None = None
    headers: dict[str, str] | None = Field(default=None, max_length=50)
    attachments: list[AttachmentIn] | None = Field(default=None, max_length=20)
    intent: ReviewIntent | None = None
    confidence: float | None = Field(default=None, ge=0, le=1, validation_alias=CONFIDENCE)
    composition_token: str | None = Field(default=None, max_length=4096)


class RestampReviewRequest(Shape):
    """``restamp_review``: the draft stands as is, re-read against the rules in force.

    The rules re-read are named by ``composition_token`` (the spec's) or by the versions ``get_rules``
    reported (the SDK's ``against_version``, the category rules-version, and ``house_style_version``): a
    version above the current one is a 422, one below it ``409 born_stale``. Naming neither is a 422 naming
    both fields: a restamp that names no rules would record nothing. The compare-and-set is
    ``parent_revision`` and/or ``expected_version`` (the row's version); with neither, the current revision.
    ``recheck_through_seq``: the highest of the review's nudge seqs handled by this re-check; it raises the
    review's ``recheck_completed_through_seq`` (a seq the review does not have yet is a 422).
    """

    parent_revision: int | None = Field(default=None, ge=1, le=MAX_REVISION)
    expected_version: int | None = Field(default=None, ge=1, le=INT64_MAX)
    composition_token: str | None = Field(default=None, max_length=4096)
    against_version: int | None = Field(default=None, ge=0, le=INT64_MAX)
    house_style_version: int | None = Field(default=None, ge=0, le=INT64_MAX)
    recheck_through_seq: int | None = Field(
        default=None, ge=1, le=INT64_MAX, description="the highest recheck nudge seq actually handled"
    )


class PostReviewChatRequest(Shape):
    """``post_review_chat``: an ``agent_question`` turn on the review thread."""

    text: str = Field(min_length=1, max_length=10_000)
