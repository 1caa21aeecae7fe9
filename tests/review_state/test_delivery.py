"""Delivery through a real SMTP server (aiosmtpd on loopback): the reviewed bytes go out once, a refusal
fails the review, and a crash between the provider call and the record is recovered by Message-ID."""

from __future__ import annotations

import email
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from email.policy import default
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from review_state import app
from review_state.app import Decision, Env
from review_state.providers import AtData, SmtpProvider, parse_smtp_url
from reviewloop.errors import Code, DomainError
from stack.launcher import free_port

from tests.review_state.conftest import AGENT, HUMAN, opened, outbox, reasons


@dataclass
class Mailbox:
    """An aiosmtpd handler that keeps what it accepted, or refuses everything."""

    refuse: bool = False
    received: list[tuple[str, list[str], bytes]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse:
            return "550 5.1.1 <vp@acme.com>: mailbox unavailable (relay-7.internal)"
        self.received.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content))
        return "250 OK"


@pytest.fixture
async def smtp() -> AsyncIterator[tuple[Mailbox, str]]:
    mailbox = Mailbox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield mailbox, f"smtp://127.0.0.1:{port}"
    controller.stop()


class CrashAfterSend(SmtpProvider):
    """The process dies after the relay took the message and before the outcome is recorded."""

    async def deliver(
        self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str, at_data: AtData
    ) -> None:
        await super().deliver(raw, sender, recipients, rfc_message_id, at_data)
        raise RuntimeError("killed between the provider call and the record")


def _text(raw: bytes) -> tuple[email.message.EmailMessage, str]:
    message = email.message_from_bytes(raw, policy=default)
    assert isinstance(message, email.message.EmailMessage)
    body = message.get_body(preferencelist=("plain",))
    assert body is not None
    return message, body.get_content().replace("\r\n", "\n").removesuffix("\n")


async def test_delivered_bytes_equal_the_reviewed_bytes_and_the_message_id_is_recorded(
    env: Env, smtp: tuple[Mailbox, str], tmp_path: Path
) -> None:
    mailbox, url = smtp
    env.provider = SmtpProvider(url, tmp_path / "journal.log")
    review = await opened(env)
    edited = "Can you do Thursday 2pm?\n\nPilot ROI attached. Ünïcode ✓"
    sent = await app.decide(
        env, HUMAN, review.id, Decision("edit", review.revision, review.version, body=edited)
    )
    assert sent.state.value == "sent" and sent.message_id
    assert len(mailbox.received) == 1
    sender, recipients, raw = mailbox.received[0]
    message, body = _text(raw)
    assert body == sent.body_text == edited
    assert message["Subject"] == sent.subject and recipients == sent.to and sender == sent.from_address
    assert message["Message-ID"] == sent.rfc_message_id
    payload = (await outbox(env))[-1]["payload"]
    assert payload["message_id"] == sent.message_id and payload["decision"] == "edited"


async def test_a_refusal_fails_the_review_and_the_close_out_cancels_it(
    env: Env, smtp: tuple[Mailbox, str], tmp_path: Path
) -> None:
    mailbox, url = smtp
    mailbox.refuse = True
    env.provider = SmtpProvider(url, tmp_path / "journal.log")
    review = await opened(env)
    failed = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert failed.state.value == "failed" and failed.send_error
    assert "relay-7.internal" not in failed.send_error  # vendor-scrubbed
    read, _ = await app.get_review(env, AGENT, review.id)
    assert read.state.value == "failed" and read.send_error == failed.send_error
    events = [e for e in await outbox(env) if e["review_id"] == review.id]
    assert events[-1]["reason"] == "send_failed"
    assert events[-1]["payload"] == {
        "state": "failed",
        "error": failed.send_error,
        "from_state": "approved",
        "agent_retryable": False,
        "next_action": "compose_and_submit_a_new_message",
    }
    closed = await app.cancel(env, AGENT, review.id, failed.revision, "")
    assert closed.state.value == "cancelled"
    assert await reasons(env, review.id) == ["send_failed", "cancelled"]
    assert mailbox.received == []


async def test_a_crash_after_the_provider_call_is_reconciled_by_message_id_without_a_second_send(
    env: Env, smtp: tuple[Mailbox, str], tmp_path: Path
) -> None:
    mailbox, url = smtp
    env.provider = CrashAfterSend(url, tmp_path / "journal.log")
    review = await opened(env)
    parked = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert parked.state.value == "approved" and len(mailbox.received) == 1
    with pytest.raises(DomainError) as caught:
        await app.cancel(env, AGENT, review.id, parked.revision, "")
    assert caught.value.code is Code.SEND_NEEDS_RECONCILIATION
    assert caught.value.allowed_actions == ["get_review", "list_review_events"]

    env.provider = SmtpProvider(url, tmp_path / "journal.log")  # the restarted process
    assert await app.reconcile(env) == 0  # a live attempt is left alone
    env.settings = replace(env.settings, reconcile_after=timedelta(0))
    assert await app.reconcile(env) == 1
    assert await app.reconcile(env) == 0
    sent, _ = await app.get_review(env, AGENT, review.id)
    assert (
        sent.state.value == "sent" and sent.rfc_message_id == _text(mailbox.received[0][2])[0]["Message-ID"]
    )
    assert len(mailbox.received) == 1  # never resent
    assert await reasons(env, review.id) == ["sent"]


async def test_a_parked_attempt_the_provider_never_took_is_failed_not_resent(
    env: Env, tmp_path: Path
) -> None:
    from tests.review_state.conftest import reach

    review = await reach(env, "approved")  # the .eml provider lost the outcome: no file was written
    env.settings = replace(env.settings, reconcile_after=timedelta(0))
    assert await app.reconcile(env) == 1
    failed, _ = await app.get_review(env, AGENT, review.id)
    assert failed.state.value == "failed" and not list((tmp_path / "outbox").glob("*.eml"))
    assert await reasons(env, review.id) == ["send_failed"]


def test_smtp_urls() -> None:
    target = parse_smtp_url("smtps://user%40x:p%3Ass@mail.example:2465")
    assert (target.hostname, target.port, target.username, target.password, target.use_tls) == (
        "mail.example",
        2465,
        "user@x",
        "p:ss",
        True,
    )
    assert parse_smtp_url("smtp://relay").port == 25
    with pytest.raises(ValueError):
        parse_smtp_url("http://relay")
