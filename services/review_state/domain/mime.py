"""The delivered bytes: one RFC 5322 message built from the reviewed fields, so what the human
reviewed is exactly what goes out."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


_HEADERS = _HeaderClasses()
_POLICY = SMTP.clone(header_factory=_HEADERS)


def rfc_message_id(message_id: str, from_address: str) -> str:
    """The RFC 5322 Message-ID of a message we record or send, in the sender's domain."""
    domain = from_address.rpartition("@")[2] or "reviewloop.local"
    return f"<{message_id}@{domain}>"


@dataclass(frozen=True)
class Outgoing:
    """The fields one delivered message is built from."""

    from_address: str
    to: Sequence[str]
    cc: Sequence[str]
    subject: str
    body_text: str
    body_html: str | None
    reply_to: str | None
    headers: Mapping[str, str]
    attachments: Sequence[Attachment]
    rfc_message_id: str
    in_reply_to: str | None
    references: str | None
    date: datetime


def message_of(review: Review, date: datetime) -> bytes:
    """The approved review as the bytes the provider delivers."""
    return build_message(
        Outgoing(
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
    )


def build_message(out: Outgoing) -> bytes:
    """The message as wire bytes (CRLF). Bcc recipients ride the envelope only, never a header."""
    if not (out.body_html or out.attachments) and (plain := _plain_bytes(out)):
        return plain
    message = EmailMessage(policy=_POLICY)
    message["From"] = out.from_address
    message["To"] = ", ".join(out.to)
    if out.cc:
        message["Cc"] = ", ".join(out.cc)
    message["Subject"] = out.subject
    message["Date"] = format_datetime(out.date)
    message["Message-ID"] = out.rfc_message_id
    if out.reply_to:
        message["Reply-To"] = out.reply_to
    if out.in_reply_to:
        message["In-Reply-To"] = out.in_reply_to
    if out.references:
        message["References"] = out.references
    for name, value in sorted(out.headers.items()):
        message[name] = value
    message.set_content(out.body_text)
    if out.body_html:
        message.add_alternative(out.body_html, subtype="html")
    for attachment in out.attachments:
        maintype, _, subtype = attachment.content_type.partition("/")
        message.add_attachment(
            attachment.content, maintype=maintype, subtype=subtype, filename=attachment.filename
        )
    _fix_boundaries(message, out)
    return message.as_bytes()


def _fix_boundaries(message: EmailMessage, out: Outgoing) -> None:
    """Multipart boundaries derived from the content, where the email package draws random ones: the
    same reviewed fields are the same bytes, so the digest a human approved is the digest delivered.
    A boundary derived from the content cannot be planted in it (it would change the content)."""
    seed = hashlib.sha256()
    for value in (out.subject, out.body_text, out.body_html or ""):
        seed.update(value.encode("utf-8", "surrogatepass") + b"\0")
    for attachment in out.attachments:
        seed.update(attachment.filename.encode("utf-8", "surrogatepass") + b"\0" + attachment.content)
    digest = seed.hexdigest()
    for index, part in enumerate(message.walk()):
        if part.is_multipart():
            part.set_boundary(f"=_rl{index}_{digest[:32]}")


# Date and Message-ID are stamped when the message goes out (a retry keeps its Message-ID, but it is
# minted at approval, after the human saw the message): the approval digest leaves both out.
_STAMPED = re.compile(
    rb"^(?:Date|Message-ID):[^\r\n]*\r\n(?:[ \t][^\r\n]*\r\n)*", re.IGNORECASE | re.MULTILINE
)


def approval_digest(raw: bytes) -> str:
    """Hex sha256 of the wire bytes ``raw`` without their top-level Date and Message-ID fields: what a
    human's approval names, and what the delivered message (as the relay received it) hashes to."""
    head, _, body = raw.partition(b"\r\n\r\n")
    head = _STAMPED.sub(b"", head + b"\r\n")
    return hashlib.sha256(head + b"\r\n" + body).hexdigest()


# A message whose bytes are written here, without the email package, since the policy writes them as
# given (a property test holds the two to the same bytes): bare addresses, header values of printable
# ASCII words that fit their line and look like no encoded word, and one ASCII text part whose lines
# fit. Every other message is the policy's to build.
_ADDRESS = re.compile(r"[A-Za-z0-9_%+-]+(?:\.[A-Za-z0-9_%+-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_WORDS = re.compile(r"[!-~]+(?: [!-~]+)*")
_NAME = re.compile(r"[A-Za-z0-9-]+")
_LINE_MAX = 78  # the SMTP policy's max_line_length: a longer line is folded or encoded
_OPTIONAL = frozenset({"Cc", "Reply-To", "In-Reply-To", "References"})
_TEXT_PART = (
    b'Content-Type: text/plain; charset="utf-8"\r\nContent-Transfer-Encoding: 7bit\r\n'
    b"MIME-Version: 1.0\r\n\r\n"
)


def _plain_bytes(out: Outgoing) -> bytes | None:
    """``build_message``'s bytes for a plain text message, without the email package; None for any
    other message."""
    to, cc, reply_to = out.to, out.cc, out.reply_to
    if not to:
        return None
    if not all(
        _ADDRESS.fullmatch(a) for a in (out.from_address, *to, *cc, *([reply_to] if reply_to else []))
    ):
        return None
    if any(not _NAME.fullmatch(name) or name.lower() in _HEADERS.registry for name in out.headers):
        return None  # a header the registry parses (or a name it would refuse) is the policy's
    fields = [
        ("From", out.from_address),
        ("To", ", ".join(to)),
        ("Cc", ", ".join(cc)),
        ("Subject", out.subject),
        ("Date", format_datetime(out.date)),
        ("Message-ID", out.rfc_message_id),
        ("Reply-To", reply_to or ""),
        ("In-Reply-To", out.in_reply_to or ""),
        ("References", out.references or ""),
        *sorted(out.headers.items()),
    ]
    lines = []
    for name, value in fields:
        if not value and name in _OPTIONAL:
            continue
        if len(name) + 2 + len(value) > _LINE_MAX or "=?" in value or not _WORDS.fullmatch(value):
            return None
        lines.append(f"{name}: {value}\r\n")
    if not out.body_text.isascii():
        return None
    body = out.body_text.encode("ascii").splitlines()  # as the policy splits it: on CR, LF and CRLF
    if any(len(line) > _LINE_MAX for line in body):
        return None
    return "".join(lines).encode("ascii") + _TEXT_PART + b"\r\n".join(body) + b"\r\n"
