"""Delivery through a real SMTP server (aiosmtpd on loopback): the reviewed bytes go out once, a refusal
fails the review, a try that never reached DATA is retried, one past it is parked until evidence (the
journal, the Sent folder over a real IMAP server) or an operator closes it, and a worker that dies is
replaced by the sweep without a second send."""

from __future__ import annotations

import asyncio
import contextlib
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
from review_state.app import delivery as delivering
from review_state.providers import AtData, EmlProvider, ImapSentFolder, SmtpProvider, parse_smtp_url
from review_state.store.tables import delivery_attempts
from reviewloop.errors import Code, DomainError
from reviewloop.storage import utcnow
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy import update
from stack.launcher import free_port

from tests.imap_server import ImapServer
from tests.review_state.conftest import ADMIN, AGENT, HUMAN, opened, outbox, reasons
from tests.statements import statements


@dataclass
class Mailbox:
    """An aiosmtpd handler that keeps what it accepted, or refuses everything, or defers the first
    ``defer`` RCPTs (before DATA), or takes the message and drops the connection before its reply."""

    refuse: bool = False
    defer: int = 0
    drop_after_data: bool = False
    received: list[tuple[str, list[str], bytes]] = field(default_factory=list)

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        if self.defer:
            self.defer -= 1
            return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse:
            return "550 5.1.1 <vp@acme.com>: mailbox unavailable (relay-7.internal)"
        self.received.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content))
        if self.drop_after_data:
            server.transport.close()  # the relay took it; the 250 never arrives
        return "250 OK"

    def raw(self) -> list[bytes]:
        return [raw for _, _, raw in self.received]


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


async def lapse_leases(env: Env) -> None:
    """Time passes for the delivery table: every lease and retry time is due (no sleeping)."""
    async with env.db.transaction() as uow:
        await uow.conn.execute(
            update(delivery_attempts)
            .where(delivery_attempts.c.lease_until.is_not(None))
            .values(lease_until=utcnow() - timedelta(seconds=1))
        )


async def delivery(env: Env, review_id: str) -> tuple[str, int]:
    attempt = await app.get_delivery(env, AGENT, review_id)
    assert attempt is not None
    return app.delivery_status(attempt), attempt.tries


async def test_a_crash_after_the_provider_call_is_reconciled_by_message_id_without_a_second_send(
    env: Env, smtp: tuple[Mailbox, str], tmp_path: Path
) -> None:
    mailbox, url = smtp
    env.provider = CrashAfterSend(url, tmp_path / "journal.log")
    review = await opened(env)
    parked = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert parked.state.value == "approved" and len(mailbox.received) == 1
    assert await delivery(env, review.id) == ("sending", 1)  # past DATA, its worker gone
    with pytest.raises(DomainError) as caught:
        await app.cancel(env, AGENT, review.id, parked.revision, "")
    # Its lease is live: the send is in flight, not parked (spec 000: from approved, "nothing").
    assert caught.value.code is Code.WRONG_STATE and caught.value.state is not None
    assert caught.value.allowed_actions == ["get_review", "list_review_events"]

    env.provider = SmtpProvider(url, tmp_path / "journal.log")  # the restarted process
    assert await app.reconcile(env) == 0  # a live claim is left alone
    assert (await app.get_review(env, AGENT, review.id))[0].state.value == "approved"
    await lapse_leases(env)
    await app.reconcile(env)  # the dead worker's claim lapsed: the journal says it went out
    await app.reconcile(env)
    sent, _ = await app.get_review(env, AGENT, review.id)
    assert (
        sent.state.value == "sent" and sent.rfc_message_id == _text(mailbox.received[0][2])[0]["Message-ID"]
    )
    assert len(mailbox.received) == 1  # never resent
    assert await reasons(env, review.id) == ["sent"]
    assert await delivery(env, review.id) == ("delivered", 1)


async def test_a_parked_attempt_the_provider_never_took_is_sent_once_by_the_sweep_not_failed(
    env: Env, tmp_path: Path
) -> None:
    from tests.review_state.conftest import reach

    review = await reach(env, "approved")  # the .eml provider lost the outcome: no file was written
    assert await delivery(env, review.id) == ("send_needs_reconciliation", 1)
    assert await app.reconcile(env) == 1  # the provider knows it never took it: queued again
    await app.reconcile(env)
    sent, _ = await app.get_review(env, AGENT, review.id)
    assert sent.state.value == "sent" and len(list((tmp_path / "outbox").glob("*.eml"))) == 1
    assert await reasons(env, review.id) == ["sent"]


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


async def test_a_relay_that_defers_before_data_is_retried_and_delivers_once(
    env: Env, smtp: tuple[Mailbox, str], tmp_path: Path
) -> None:
    mailbox, url = smtp
    mailbox.defer = 1
    env.provider = SmtpProvider(url, tmp_path / "journal.log")
    review = await opened(env)
    decided = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert decided.state.value == "approved" and mailbox.received == []
    assert await delivery(env, review.id) == ("queued", 1)  # never reached DATA: safe to try again
    attempt = await app.get_delivery(env, AGENT, review.id)
    assert attempt is not None and attempt.error and "451" in attempt.error
    await lapse_leases(env)  # its retry comes due
    await app.reconcile(env)
    sent, _ = await app.get_review(env, AGENT, review.id)
    assert sent.state.value == "sent" and len(mailbox.received) == 1
    assert await delivery(env, review.id) == ("delivered", 2)
    assert await reasons(env, review.id) == ["sent"]


async def test_a_relay_that_drops_after_data_parks_the_review_until_the_sent_folder_shows_it(
    env: Env, smtp: tuple[Mailbox, str], tmp_path: Path
) -> None:
    mailbox, url = smtp
    mailbox.drop_after_data = True
    env.provider = SmtpProvider(url, tmp_path / "journal.log")
    review = await opened(env)
    decided = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert decided.state.value == "approved" and len(mailbox.received) == 1
    assert await delivery(env, review.id) == ("send_needs_reconciliation", 1)
    with pytest.raises(DomainError) as caught:
        await app.cancel(env, AGENT, review.id, decided.revision, "")
    assert caught.value.code is Code.SEND_NEEDS_RECONCILIATION

    # No clock turns it into `failed`: a month later, without evidence, it is still parked.
    async with env.db.transaction() as uow:
        month_ago = utcnow() - timedelta(days=30)
        await uow.conn.execute(update(delivery_attempts).values(started_at=month_ago, parked_at=month_ago))
    assert await app.reconcile(env) == 0
    assert (await app.get_review(env, AGENT, review.id))[0].state.value == "approved"
    assert await reasons(env, review.id) == []

    imap = ImapServer(mailbox.raw)  # the sending mailbox's Sent folder
    imap.start()
    try:
        env.provider = SmtpProvider(url, tmp_path / "journal.log", ImapSentFolder(imap.url))
        assert await app.reconcile(env) == 1
    finally:
        imap.stop()
    sent, _ = await app.get_review(env, AGENT, review.id)
    assert sent.state.value == "sent" and len(mailbox.received) == 1 and imap.searches == 1
    assert await reasons(env, review.id) == ["sent"]


async def test_the_operator_resolves_a_parked_delivery_with_a_reason(
    env: Env, smtp: tuple[Mailbox, str], tmp_path: Path
) -> None:
    mailbox, url = smtp
    mailbox.drop_after_data = True
    env.provider = SmtpProvider(url, tmp_path / "journal.log")
    first, second = await opened(env), await opened(env)
    for review in (first, second):
        await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    with pytest.raises(DomainError) as caught:
        await app.resolve_delivery(env, HUMAN, first.id, "delivered", "relay log")
    assert caught.value.code is Code.FORBIDDEN_SCOPE
    for outcome, reason, field_ in (("bounced", "x", "/outcome"), ("failed", "  ", "/reason")):
        with pytest.raises(DomainError) as caught:
            await app.resolve_delivery(env, ADMIN, first.id, outcome, reason)
        assert caught.value.code is Code.BAD_REQUEST and caught.value.detail.startswith(field_)

    sent = await app.resolve_delivery(env, ADMIN, first.id, "delivered", "relay log shows 250 queued as 4F2A")
    assert sent.state.value == "sent" and sent.message_id
    attempt = await app.get_delivery(env, AGENT, first.id)
    assert attempt is not None and attempt.resolution == "key_a: relay log shows 250 queued as 4F2A"
    failed = await app.resolve_delivery(env, ADMIN, second.id, "failed", "relay lost the queue")
    assert failed.state.value == "failed" and failed.send_error
    assert "relay lost the queue" in failed.send_error
    assert await reasons(env, first.id) == ["sent"] and await reasons(env, second.id) == ["send_failed"]
    with pytest.raises(DomainError) as caught:
        await app.resolve_delivery(env, ADMIN, first.id, "failed", "changed my mind")
    assert caught.value.code is Code.WRONG_STATE


class Stall(EmlProvider):
    """A provider whose try hangs before or after DATA until the test lets it go (or kills it)."""

    def __init__(self, directory: Path, where: str) -> None:
        super().__init__(directory)
        self.where = where
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def deliver(
        self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str, at_data: AtData
    ) -> None:
        if self.where == "before_data":
            self.entered.set()
            await self.go.wait()
            await super().deliver(raw, sender, recipients, rfc_message_id, at_data)
            return
        await super().deliver(raw, sender, recipients, rfc_message_id, at_data)
        self.entered.set()  # the bytes are out; the 250 is not recorded yet
        await self.go.wait()


@pytest.mark.parametrize("where", ["before_data", "after_data"])
async def test_a_worker_killed_mid_attempt_is_recovered_by_the_sweep_and_sends_once(
    env: Env, tmp_path: Path, where: str
) -> None:
    env.provider = stall = Stall(tmp_path / "outbox", where)
    env.settings = replace(env.settings, delivery_wait_s=0)  # the decision answers at once
    review = await opened(env)
    decided = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert decided.state.value == "approved"
    await stall.entered.wait()
    env.workers[review.id].cancel()  # the process dies mid-attempt
    with contextlib.suppress(asyncio.CancelledError):
        await env.workers[review.id]
    assert await delivery(env, review.id) == ("queued" if where == "before_data" else "sending", 1)

    env.provider = EmlProvider(tmp_path / "outbox")  # the restarted process
    await lapse_leases(env)
    await app.reconcile(env)
    sent, _ = await app.get_review(env, AGENT, review.id)
    assert sent.state.value == "sent" and len(list((tmp_path / "outbox").glob("*.eml"))) == 1
    assert await reasons(env, review.id) == ["sent"]
    assert (await delivery(env, review.id))[0] == "delivered"


async def test_a_cancelled_decision_request_does_not_cancel_its_delivery(env: Env, tmp_path: Path) -> None:
    env.provider = stall = Stall(tmp_path / "outbox", "before_data")
    review = await opened(env)
    request = asyncio.create_task(
        app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    )
    await stall.entered.wait()
    request.cancel()  # the gateway died: grpc cancels the handler
    with pytest.raises(asyncio.CancelledError):
        await request
    stall.go.set()
    await env.workers[review.id]
    sent, _ = await app.get_review(env, AGENT, review.id)
    assert sent.state.value == "sent" and len(list((tmp_path / "outbox").glob("*.eml"))) == 1
    assert await reasons(env, review.id) == ["sent"]


async def test_a_replayed_decision_drives_the_delivery_its_first_call_left(env: Env, tmp_path: Path) -> None:
    env.provider = stall = Stall(tmp_path / "outbox", "before_data")
    env.settings = replace(env.settings, delivery_wait_s=0)
    review = await opened(env)
    decision = Decision("approve", review.revision, review.version)
    await app.decide(env, HUMAN, review.id, decision, idempotency_key="k1")
    await stall.entered.wait()
    env.workers[review.id].cancel()  # the first call's process died before DATA
    with contextlib.suppress(asyncio.CancelledError):
        await env.workers[review.id]
    env.provider = EmlProvider(tmp_path / "outbox")
    env.settings = replace(env.settings, delivery_wait_s=10)
    await lapse_leases(env)
    replayed = await app.decide(env, HUMAN, review.id, decision, idempotency_key="k1")
    assert replayed.state.value == "sent" and len(list((tmp_path / "outbox").glob("*.eml"))) == 1


async def test_the_reviewer_plane_answers_what_happened_to_the_delivery(env: Env) -> None:
    from tests.review_state.conftest import DRAFT, REVIEWER, provider

    for mode, kind, state in (
        ("unknown", "queued", "approved"),
        ("refuse", "failed", "failed"),
        ("ok", "sent", "sent"),
    ):
        _, review = await app.submit(
            env,
            AGENT,
            app.SubmitRequest(
                kind="send", draft=DRAFT, category_id="cat_1", idempotency_key="", confidence=0.9
            ),
        )
        provider(env).mode = mode
        result = await app.reviewer_decide(
            env, REVIEWER, review.id, Decision("approve", review.revision, review.version)
        )
        assert (result.kind, result.review.state.value) == (kind, state)


async def test_two_replicas_sweeping_at_once_deliver_a_due_attempt_once(
    env: Env, smtp: tuple[Mailbox, str], tmp_path: Path
) -> None:
    mailbox, url = smtp
    mailbox.defer = 1
    env.provider = SmtpProvider(url, tmp_path / "journal.log")
    review = await opened(env)
    await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert await delivery(env, review.id) == ("queued", 1)
    await lapse_leases(env)
    replicas = [replace(env, workers={}) for _ in range(3)]  # one store, three processes
    await asyncio.gather(*(app.reconcile(replica) for replica in replicas))
    sent, _ = await app.get_review(env, AGENT, review.id)
    assert sent.state.value == "sent" and len(mailbox.received) == 1
    assert await reasons(env, review.id) == ["sent"]


async def test_submit_answers_only_the_contracts_statuses_whatever_the_delivery_did(env: Env) -> None:
    from tests.review_state.conftest import DRAFT, provider

    await app.set_policy(env, ADMIN, "allow_direct")
    direct = replace(DRAFT, intent=None)
    for mode, state in (("ok", "auto_sent"), ("refuse", "failed"), ("unknown", "approved")):
        provider(env).mode = mode
        status, review = await app.submit(
            env, AGENT, app.SubmitRequest(kind="send", draft=direct, category_id="", idempotency_key="")
        )
        assert (status, review.state.value) == ("sent", state)  # released; the state says how far
    provider(env).mode = "ok"
    status, review = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=DRAFT, category_id="", idempotency_key="")
    )
    assert (status, review.state.value) == ("queued_for_review", "needs_review")


async def test_a_review_read_with_its_delivery_is_one_statement_and_another_tenants_review_is_absent(
    env: Env,
) -> None:
    review = await opened(env)
    before, _, none_yet = await app.read_review(env, AGENT, review.id)
    assert before.state.value == "in_review" and none_yet is None  # no attempt before the release
    await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    with statements(env.db) as seen:
        read, turns, attempt = await app.read_review(env, AGENT, review.id)
    assert read.state.value == "sent" and attempt is not None and attempt.status == "delivered"
    assert [t.turn_type for t in turns] == [
        t.turn_type for t in (await app.get_review(env, AGENT, review.id))[1]
    ]
    assert len(seen) == 1  # the review, its turns and its attempt
    stranger = Principal(AGENT.org_id, "prj_other", ActorKind.AGENT, AGENT.actor_id)
    assert await app.get_delivery(env, stranger, review.id) is None
    with pytest.raises(DomainError) as absent:
        await app.read_review(env, stranger, review.id)
    assert absent.value.code is Code.NOT_FOUND


async def test_a_release_claims_its_own_attempt_and_a_crash_after_its_commit_is_swept_once_the_lease_lapses(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The approval's unit of work records the attempt already leased to this process's worker, which
    then starts on it without a claim statement; a process that dies between the commit and the
    worker leaves an attempt no sweep takes until its lease lapses, and then sends it once."""
    review = await opened(env)
    with statements(env.db) as seen:
        sent = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert sent.state.value == "sent"
    claims = [s.sql for s in seen if s.sql.startswith("UPDATE delivery_attempts SET lease_owner")]
    assert claims == [], claims
    assert await delivery(env, review.id) == ("delivered", 1)

    other = await opened(env)
    # The process dies right after the approval committed: its worker never runs.
    monkeypatch.setattr(app.delivery, "start_worker", lambda *args, **kwargs: asyncio.sleep(0))
    await app.decide(env, HUMAN, other.id, Decision("approve", other.revision, other.version))
    monkeypatch.undo()
    assert await delivery(env, other.id) == ("queued", 1)
    await app.reconcile(env)
    assert await delivery(env, other.id) == ("queued", 1)  # its lease is live: no sweep takes it
    await lapse_leases(env)
    await app.reconcile(env)
    await asyncio.gather(*env.workers.values())
    closed, _ = await app.get_review(env, AGENT, other.id)
    assert closed.state.value == "sent"
    assert await reasons(env, other.id) == ["sent"]
    assert await delivery(env, other.id) == ("delivered", 2)


async def test_a_delivery_closes_its_attempt_in_its_moves_statement_and_a_closed_one_is_left_as_it_is(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the close is one read, then one statement: the attempt's close, the review's move to
    sent, its message and its nudge. Closing it again, or two closes at once (the sweep and a twin),
    write it once."""
    review = await opened(env)
    with statements(env.db) as seen:
        sent = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    assert sent.state.value == "sent"
    closing = [s.sql for s in seen if "UPDATE delivery_attempts SET status" in s.sql]
    assert len(closing) == 1, closing
    if not env.db.is_sqlite:
        parts = ("UPDATE reviews", "INSERT INTO messages", "INSERT INTO outbox")
        assert all(part in closing[0] for part in parts), closing[0]
    again = await delivering._record_delivered(env, sent.project_id, sent.id)
    assert (again.state, again.version) == (sent.state, sent.version)
    assert await reasons(env, review.id) == ["sent"]

    other = await opened(env)
    monkeypatch.setattr(app.delivery, "start_worker", lambda *args, **kwargs: asyncio.sleep(0))
    await app.decide(env, HUMAN, other.id, Decision("approve", other.revision, other.version))
    monkeypatch.undo()
    closes = [delivering._record_delivered(env, other.project_id, other.id) for _ in range(2)]
    first, second = await asyncio.gather(*closes)
    assert first.state.value == second.state.value == "sent" and first.version == second.version
    assert await reasons(env, other.id) == ["sent"]
    assert await delivery(env, other.id) == ("delivered", 1)


async def test_the_eml_provider_writes_each_message_whole_once_its_data_is_journaled(tmp_path: Path) -> None:
    outbox_dir = tmp_path / "outbox"  # not there yet: the first delivery makes it
    provider = EmlProvider(outbox_dir)
    journaled: list[str] = []
    for n in range(2):

        async def at_data(n: int = n) -> None:
            assert not list(outbox_dir.glob(f"m{n}@*"))  # nothing of the message before DATA is journaled
            journaled.append(f"m{n}")

        raw = b"Subject: %d\r\n\r\nbody %d\r\n" % (n, n)
        await provider.deliver(raw, "a@x.test", ["b@y.test"], f"<m{n}@x.test>", at_data)
    assert journaled == ["m0", "m1"]
    # Each message in its own file, and no temp file left behind.
    assert sorted(p.name for p in outbox_dir.iterdir()) == ["m0@x.test.eml", "m1@x.test.eml"]
    assert (outbox_dir / "m1@x.test.eml").read_bytes() == b"Subject: 1\r\n\r\nbody 1\r\n"
    assert await provider.was_delivered("<m0@x.test>") is True
    assert await provider.was_delivered("<m2@x.test>") is False


async def test_the_smtp_journal_holds_every_accepted_message_id(
    smtp: tuple[Mailbox, str], tmp_path: Path
) -> None:
    mailbox, url = smtp
    provider = SmtpProvider(url, tmp_path / "journal" / "sent.log")  # its folder made on first use

    async def at_data() -> None:
        return None

    for n in range(3):
        raw = b"Subject: x\r\n\r\nbody\r\n"
        await provider.deliver(raw, "a@x.test", ["b@y.test"], f"<j{n}@x.test>", at_data)
    assert len(mailbox.received) == 3
    assert (tmp_path / "journal" / "sent.log").read_text().splitlines() == [
        f"<j{n}@x.test>" for n in range(3)
    ]
    assert [await provider.was_delivered(f"<j{n}@x.test>") for n in (0, 2, 3)] == [True, True, None]
