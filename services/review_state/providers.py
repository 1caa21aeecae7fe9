"""Provider adapters: where an approved review's bytes go.

The embedded default writes each message as an ``.eml`` file into ``<data dir>/outbox/``; the SMTP
adapter sends through ``aiosmtplib`` to a relay (``REVIEWLOOP_SMTP_URL``, read by ``bootstrap``) and
journals each accepted Message-ID. Both can answer "was this Message-ID delivered?" (the SMTP one also
from the Sent folder over IMAP, ``REVIEWLOOP_IMAP_URL``), which is how a parked attempt is recovered
without ever sending twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import imaplib
import logging
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, Protocol
from urllib.parse import unquote, urlparse

import aiosmtplib

log = logging.getLogger(__name__)

SMTP_TIMEOUT_S = 30.0
IMAP_TIMEOUT_S = 15.0


class Refused(Exception):
    """The provider definitely did not take the message, for good (its reason is vendor-scrubbed)."""


class NotSent(Exception):
    """The provider did not take the message this time (no DATA, or a transient reply to it): safe to
    try again with the same Message-ID."""


class OutcomeUnknown(Exception):
    """The provider may or may not have taken the message: park it, never resend."""


# Journals (and commits) "this try passes DATA now"; raises NotSent when the worker lost its claim.
AtData = Callable[[], Awaitable[None]]


class Provider(Protocol):
    async def deliver(
        self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str, at_data: AtData
    ) -> None:
        """Hand the message over, awaiting ``at_data`` right before the bytes go; raises Refused,
        NotSent or OutcomeUnknown."""

    async def was_delivered(self, rfc_message_id: str) -> bool | None:
        """True / False when the provider knows; None when it cannot tell."""


async def _write_synced(path: Path, mode: Literal["wb", "ab"], data: bytes) -> None:
    """``data`` written to ``path`` (replacing it, or appended) and on disk when this returns.

    Written on the event loop, synced and closed in a thread: the bytes are already in memory (a
    page-cache write costs less than building them did), while every blocking call a worker thread
    makes has to take the GIL back from the busy loop. The whole write in a thread cost review_state
    ~0.5 ms more per delivery under the lifecycle bench's load (docs/performance.md, round 13).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, mode)  # noqa: ASYNC230, SIM115 - on the loop by design; the thread closes it
    try:
        handle.write(data)
        handle.flush()
    except BaseException:
        handle.close()
        raise
    await asyncio.to_thread(_sync_and_close, handle)  # the thread owns the file from here


def _sync_and_close(handle: BinaryIO) -> None:
    with handle:
        os.fsync(handle.fileno())


def _file_key(rfc_message_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", rfc_message_id.strip("<>"))


class EmlProvider:
    """Writes ``<dir>/<Message-ID>.eml`` atomically (temp file, fsync, rename)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, rfc_message_id: str) -> Path:
        return self.directory / f"{_file_key(rfc_message_id)}.eml"

    async def deliver(
        self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str, at_data: AtData
    ) -> None:
        await at_data()
        path = self._path(rfc_message_id)
        tmp = path.with_suffix(".tmp")
        try:
            await _write_synced(tmp, "wb", raw)
            os.replace(tmp, path)
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


@dataclass(frozen=True)
class ImapTarget:
    hostname: str
    port: int
    username: str
    password: str
    folder: str
    use_tls: bool


def parse_imap_url(url: str) -> ImapTarget:
    """``imap://user:pass@host[:port]/<Sent folder>`` (``imaps://`` for implicit TLS)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("imap", "imaps") or not parsed.hostname or not parsed.username:
        raise ValueError(f"REVIEWLOOP_IMAP_URL must be imap://user:pass@host:port/Sent, not {url!r}")
    implicit = parsed.scheme == "imaps"
    return ImapTarget(
        hostname=parsed.hostname,
        port=parsed.port or (993 if implicit else 143),
        username=unquote(parsed.username),
        password=unquote(parsed.password or ""),
        folder=unquote(parsed.path.lstrip("/")) or "Sent",
        use_tls=implicit,
    )


class ImapSentFolder:
    """Evidence of a send: the sending mailbox's Sent folder, searched by Message-ID."""

    def __init__(self, url: str) -> None:
        self.target = parse_imap_url(url)

    async def holds(self, rfc_message_id: str) -> bool | None:
        """True when the Sent folder holds the message; None when it does not (yet) or cannot tell:
        an absent copy proves nothing, so it never fails an attempt."""
        t = self.target

        def search() -> bool:
            client_class = imaplib.IMAP4_SSL if t.use_tls else imaplib.IMAP4
            client = client_class(t.hostname, t.port, timeout=IMAP_TIMEOUT_S)
            try:
                client.login(t.username, t.password)
                status, _ = client.select(_imap_quote(t.folder), readonly=True)
                if status != "OK":
                    raise imaplib.IMAP4.error(f"cannot select {t.folder!r}")
                status, found = client.search(None, "HEADER", "Message-ID", _imap_quote(rfc_message_id))
                return status == "OK" and bool(found and found[0] and found[0].split())
            finally:
                with contextlib.suppress(Exception):
                    client.logout()

        try:
            return True if await asyncio.to_thread(search) else None
        except (imaplib.IMAP4.error, OSError, TimeoutError) as exc:
            log.warning("IMAP evidence unavailable for %s: %s", rfc_message_id, exc)
            return None


def _imap_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class SmtpProvider:
    """Sends through a relay command by command, so the worker journals DATA before the bytes go, and
    journals each Message-ID the relay accepted (``250``). A send it cannot confirm is recovered from
    that journal or, where configured, the Sent folder over IMAP."""

    def __init__(self, url: str, journal: Path, sent_folder: ImapSentFolder | None = None) -> None:
        self.target = parse_smtp_url(url)
        self.journal = journal
        self.sent_folder = sent_folder

    async def deliver(
        self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str, at_data: AtData
    ) -> None:
        t = self.target
        client = aiosmtplib.SMTP(
            hostname=t.hostname,
            port=t.port,
            username=t.username,
            password=t.password,
            use_tls=t.use_tls,
            start_tls=t.start_tls,
            timeout=SMTP_TIMEOUT_S,
        )
        try:
            try:
                await client.connect()
                await client.mail(sender)
                refused = 0
                for recipient in recipients:
                    try:
                        await client.rcpt(recipient)
                    except aiosmtplib.SMTPRecipientRefused as exc:
                        if exc.code < 500:
                            raise
                        refused += 1
                if refused == len(recipients):
                    raise Refused("the mail relay refused every recipient")
            except aiosmtplib.SMTPResponseException as exc:
                # A reply before DATA: a 5xx is for good, a 4xx is for now.
                if exc.code >= 500:
                    raise Refused(f"the mail relay refused the message ({exc.code})") from exc
                raise NotSent(f"the mail relay deferred the message ({exc.code})") from exc
            except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
                raise NotSent(f"the mail relay could not be reached ({type(exc).__name__})") from exc
            await at_data()
            try:
                await client.data(raw)
            except aiosmtplib.SMTPResponseException as exc:
                # The relay answered the data: it did not take the message.
                if exc.code >= 500:
                    raise Refused(f"the mail relay refused the message ({exc.code})") from exc
                raise NotSent(f"the mail relay deferred the message ({exc.code})") from exc
            except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
                raise OutcomeUnknown(type(exc).__name__) from exc
        finally:
            client.close()
        await _write_synced(self.journal, "ab", f"{rfc_message_id}\n".encode())

    async def was_delivered(self, rfc_message_id: str) -> bool | None:
        def journaled() -> bool:
            if not self.journal.exists():
                return False
            with open(self.journal, encoding="utf-8") as handle:
                return any(line.strip() == rfc_message_id for line in handle)

        if await asyncio.to_thread(journaled):
            return True
        return None if self.sent_folder is None else await self.sent_folder.holds(rfc_message_id)
