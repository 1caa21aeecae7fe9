"""Provider adapters: where an approved review's bytes go.

The embedded default writes each message as an ``.eml`` file into ``<data dir>/outbox/``; the SMTP
adapter sends through ``aiosmtplib`` to a relay (``REVIEWLOOP_SMTP_URL``, read by ``bootstrap``) and
journals each accepted Message-ID. Both can answer "was this Message-ID delivered?", which is how a parked attempt is
recovered without ever sending twice.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

import aiosmtplib

SMTP_TIMEOUT_S = 30.0


class Refused(Exception):
    """The provider definitely did not take the message (its reason is vendor-scrubbed)."""


class OutcomeUnknown(Exception):
    """The provider may or may not have taken the message: park it, never resend."""


class Provider(Protocol):
    async def deliver(self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str) -> None:
        """Hand the message over; raises Refused or OutcomeUnknown."""

    async def was_delivered(self, rfc_message_id: str) -> bool | None:
        """True / False when the provider knows; None when it cannot tell."""


def _file_key(rfc_message_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", rfc_message_id.strip("<>"))


class EmlProvider:
    """Writes ``<dir>/<Message-ID>.eml`` atomically (temp file, fsync, rename)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, rfc_message_id: str) -> Path:
        return self.directory / f"{_file_key(rfc_message_id)}.eml"

    async def deliver(self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str) -> None:
        def write() -> None:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self._path(rfc_message_id)
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as handle:
                handle.write(raw)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)

        try:
            await asyncio.to_thread(write)
        except OSError as exc:
            raise Refused("the local outbox could not be written") from exc

    async def was_delivered(self, rfc_message_id: str) -> bool | None:
        return await asyncio.to_thread(self._path(rfc_message_id).exists)


@dataclass(frozen=True)
class SmtpTarget:
    hostname: str
    port: int
    username: str | None
    password: str | None
    use_tls: bool
    start_tls: bool | None


def parse_smtp_url(url: str) -> SmtpTarget:
    """``smtp://[user:pass@]host[:port]`` (STARTTLS when offered), ``smtps://`` (implicit TLS)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("smtp", "smtps") or not parsed.hostname:
        raise ValueError(f"REVIEWLOOP_SMTP_URL must be smtp://host:port or smtps://host:port, not {url!r}")
    implicit = parsed.scheme == "smtps"
    return SmtpTarget(
        hostname=parsed.hostname,
        port=parsed.port or (465 if implicit else 25),
        username=unquote(parsed.username) if parsed.username else None,
        password=unquote(parsed.password) if parsed.password else None,
        use_tls=implicit,
        start_tls=None if not implicit else False,
    )


class SmtpProvider:
    """Sends through a relay and journals each Message-ID the relay accepted (``250``)."""

    def __init__(self, url: str, journal: Path) -> None:
        self.target = parse_smtp_url(url)
        self.journal = journal

    async def deliver(self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str) -> None:
        t = self.target
        try:
            await aiosmtplib.send(
                raw,
                sender=sender,
                recipients=list(recipients),
                hostname=t.hostname,
                port=t.port,
                username=t.username,
                password=t.password,
                use_tls=t.use_tls,
                start_tls=t.start_tls,
                timeout=SMTP_TIMEOUT_S,
            )
        except aiosmtplib.SMTPRecipientsRefused as exc:
            raise Refused("the mail relay refused every recipient") from exc
        except aiosmtplib.SMTPResponseException as exc:
            # A reply code before the data was accepted: the relay did not take the message.
            raise Refused(f"the mail relay refused the message ({exc.code})") from exc
        except aiosmtplib.SMTPConnectError as exc:
            raise Refused("the mail relay could not be reached") from exc
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise OutcomeUnknown(type(exc).__name__) from exc
        await asyncio.to_thread(self._journal, rfc_message_id)

    def _journal(self, rfc_message_id: str) -> None:
        self.journal.parent.mkdir(parents=True, exist_ok=True)
        with open(self.journal, "a", encoding="utf-8") as handle:
            handle.write(rfc_message_id + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    async def was_delivered(self, rfc_message_id: str) -> bool | None:
        def lookup() -> bool | None:
            if not self.journal.exists():
                return None
            with open(self.journal, encoding="utf-8") as handle:
                return True if any(line.strip() == rfc_message_id for line in handle) else None

        return await asyncio.to_thread(lookup)
