"""The console's review policy and composition settings, contacts, threads and inbound mail."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
)

from reviewloop.shapes._base import (
    MAX_BODY_TEXT,
    Address,
    Addresses,
    Shape,
)

# --- reviews: the console (review policy, contacts, inbound mail) -----------------------------------


class PolicyIn(Shape):
    """``set_review_policy``: the project's review policy."""

    policy: Literal["require_review", "allow_direct", "auto_send_graduated"]


class CompositionSettingsIn(Shape):
    """``set_composition_settings``: what a project requires of every send, reply and forward."""

    require_composition_token: bool = Field(
        description="true: a send, reply or forward without a composition_token (from an unfiltered get_rules) "
        "is refused 422 naming /composition_token; false (the default): it is accepted and recorded as "
        "naming no rule snapshot (the review's rule_snapshot_named is false)"
    )


class AddressIn(Shape):
    """A recipient address to block or suppress."""

    address: Address


class InboundIn(Shape):
    """A received message to record, so a reply or forward has a parent."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: Address = Field(alias="from")
    to: Addresses = Field(min_length=1, max_length=100)
    cc: Addresses = Field(default_factory=list, max_length=100)
    subject: str = Field(default="", max_length=998)
    body_text: str = Field(default="", max_length=MAX_BODY_TEXT)
    headers: dict[str, str] = Field(default_factory=dict, max_length=100)


class Contact(Shape):
    """A recipient's flags in the project, with since when and by whom each is set."""

    address: str
    blocked: bool
    suppressed: bool
    blocked_at: datetime | None = None
    blocked_by: str | None = Field(default=None, description="the admin key's actor id that blocked it")
    suppressed_at: datetime | None = None
    suppressed_by: str | None = None


class ContactList(Shape):
    """The project's blocked and suppressed recipients, by address."""

    contacts: list[Contact]


class Thread(Shape):
    """A thread as it is now.

    A reply names these as ``expected_context_version`` and ``expected_last_message_id``: a thread that
    moved since is ``409 reply_context_changed``.
    """

    thread_id: str
    context_version: str = Field(description="moves whenever a message joins the thread")
    last_message_id: str


class InboundMessage(Shape):
    """A recorded inbound message: the parent a reply or forward names."""

    message_id: str
    thread_ref: str
    rfc_message_id: str
