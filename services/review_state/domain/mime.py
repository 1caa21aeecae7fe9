"""The delivered bytes: one RFC 5322 message built from the reviewed fields, so what the human
reviewed is exactly what goes out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from email.headerregistry import BaseHeader, HeaderRegistry
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime
from typing import Any

from review_state.domain.review import Review
from review_state.domain.submission import Attachment


class _HeaderClasses(HeaderRegistry):
    """The standard header registry with each of its classes made once.

    The stdlib's makes a new class on every lookup, two per header set (~11 us each): a fifth of a
    message's build. The class depends only on the registry's entry, so a handful are ever made.
    """

    def __init__(self) -> None:
        super().__init__()
        self._made: dict[type[Any], type[BaseHeader]] = {}  # the registry entry -> its class

    def __getitem__(self, name: str) -> type[BaseHeader]:
        cls = self.registry.get(name.lower(), self.default_class)
        made = self._made.get(cls)
        if made is None:
            made = self._made[cls] = type("_" + cls.__name__, (cls, self.base_class), {})
        return made


_POLICY = SMTP.clone(header_factory=_HeaderClasses())


def rfc_message_id(message_id: str, from_address: str) -> str:
    """The RFC 5322 Message-ID of a message we record or send, in the sender's domain."""
    domain = from_address.rpartition("@")[2] or "reviewloop.local"
    return f"<{message_id}@{domain}>"


def message_of(review: Review, date: datetime) -> bytes:
    """The approved review as the bytes the provider delivers."""
    return build_message(
        from_address=review.from_address,
        to=review.to,
        cc=review.cc,
        subject=review.subject,
        body_text=review.body_text,
        body_html=review.body_html,
        reply_to=review.reply_to,
        headers=review.headers,
        attachments=review.attachments,
        rfc_message_id=review.rfc_message_id or "",
        in_reply_to=review.in_reply_to,
        references=review.references_hdr,
        date=date,
    )


def build_message(
    *,
    from_address: str,
    to: Sequence[str],
    cc: Sequence[str],
    subject: str,
    body_text: str,
    body_html: str | None,
    reply_to: str | None,
    headers: Mapping[str, str],
    attachments: Sequence[Attachment],
    rfc_message_id: str,
    in_reply_to: str | None,
    references: str | None,
    date: datetime,
) -> bytes:
    """The message as wire bytes (CRLF). Bcc recipients ride the envelope only, never a header."""
    message = EmailMessage(policy=_POLICY)
    message["From"] = from_address
    message["To"] = ", ".join(to)
    if cc:
        message["Cc"] = ", ".join(cc)
    message["Subject"] = subject
    message["Date"] = format_datetime(date)
    message["Message-ID"] = rfc_message_id
    if reply_to:
        message["Reply-To"] = reply_to
    if in_reply_to:
        message["In-Reply-To"] = in_reply_to
    if references:
        message["References"] = references
    for name, value in sorted(headers.items()):
        message[name] = value
    message.set_content(body_text)
    if body_html:
        message.add_alternative(body_html, subtype="html")
    for attachment in attachments:
        maintype, _, subtype = attachment.content_type.partition("/")
        message.add_attachment(
            attachment.content, maintype=maintype, subtype=subtype, filename=attachment.filename
        )
    return message.as_bytes()
