"""Reply and forward materialization: the human reviews the exact bytes that will be delivered."""

from __future__ import annotations

import email
import re
from datetime import UTC, datetime
from email.policy import SMTP, default
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from review_state import app
from review_state.app import Decision, Env
from review_state.domain import mime
from review_state.domain.review import Review
from review_state.domain.submission import (
    Attachment,
    Draft,
    Parent,
    forward_subject,
    materialize,
    reply_subject,
)
from review_state.store import Message
from reviewloop.errors import Code, DomainError

from tests.review_state.conftest import ADMIN, AGENT, HUMAN, INTENT, outbox


@pytest.mark.parametrize(
    ("subject", "expected"),
    [("Q3 pilot", "Re: Q3 pilot"), ("Re: Q3 pilot", "Re: Q3 pilot"), ("RE: re:Q3", "Re: Q3")],
)
def test_reply_subject_is_never_re_re(subject: str, expected: str) -> None:
    assert reply_subject(subject) == expected


def test_forward_subject_is_never_fwd_fwd() -> None:
    assert forward_subject("Fwd: FW: Q3") == "Fwd: Q3"


async def _inbound(env: Env, **headers: str) -> Message:
    return await app.record_inbound(
        env,
        ADMIN,
        from_address="vp@acme.com",
        to=["sales@us.example"],
        cc=["cfo@acme.com"],
        subject="Re: Q3 pilot",
        body_text="Can we talk pricing?",
        headers={"Message-ID": "<inbound-1@acme.com>", **headers},
    )


async def _approve(env: Env, review_id: str) -> Review:
    review, _ = await app.get_review(env, HUMAN, review_id)
    review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
    return await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))


def _text(part: email.message.EmailMessage) -> str:
    """A text part as the reviewer saw it: wire CRLFs back to newlines, the MIME trailing newline off."""
    content: str = part.get_content()
    return content.replace("\r\n", "\n").removesuffix("\n")


def _delivered(tmp_path: Path) -> email.message.EmailMessage:
    files = list((tmp_path / "outbox").glob("*.eml"))
    assert len(files) == 1
    message = email.message_from_bytes(files[0].read_bytes(), policy=default)
    assert isinstance(message, email.message.EmailMessage)
    return message


async def test_a_reply_is_materialized_from_the_inbound_message_and_threads(env: Env, tmp_path: Path) -> None:
    parent = await _inbound(env)
    draft = Draft(to=[], cc=[], bcc=[], subject="", body_text="Happy to: Thursday 2pm?", intent=INTENT)
    status, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(
            kind="reply", draft=draft, category_id="", idempotency_key="", parent_message_id=parent.id
        ),
    )
    assert (status, review.kind, review.subject, review.to) == (
        "queued_for_review",
        "reply",
        "Re: Q3 pilot",
        ["vp@acme.com"],
    )
    assert review.thread_ref == parent.thread_ref and review.from_address == "sales@us.example"
    sent = await _approve(env, review.id)
    message = _delivered(tmp_path)
    assert message["In-Reply-To"] == "<inbound-1@acme.com>"
    assert message["References"] == "<inbound-1@acme.com>"
    assert message["Subject"] == "Re: Q3 pilot" and message["From"] == "sales@us.example"
    assert _text(message) == "Happy to: Thursday 2pm?"
    nudge = (await outbox(env))[-1]
    assert (
        nudge["reason"] == "sent" and nudge["payload"]["thread_ref"] == parent.thread_ref == sent.thread_ref
    )


async def test_a_forward_quotes_its_parent_carries_no_in_reply_to_and_an_edit_is_what_goes_out(
    env: Env, tmp_path: Path
) -> None:
    parent = await _inbound(env)
    draft = Draft(
        to=["partner@other.com"],
        cc=[],
        bcc=["audit@us.example"],
        subject="",
        body_text="FYI, see below.",
        intent=INTENT,
        reply_to="team@us.example",
        headers={"X-Campaign": "q3"},
        attachments=(Attachment("roi.pdf", "application/pdf", b"%PDF-1.4"),),
    )
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(
            kind="forward", draft=draft, category_id="", idempotency_key="", parent_message_id=parent.id
        ),
    )
    assert review.subject == "Fwd: Re: Q3 pilot"
    assert review.body_text.startswith(
        "FYI, see below.\n\n---------- Forwarded message ---------\nFrom: vp@acme.com"
    )
    assert review.body_text.endswith("Can we talk pricing?") and review.thread_ref is None
    review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
    edited_body = review.body_text.replace("Can we talk pricing?", "[pricing removed]")
    sent = await app.decide(
        env, HUMAN, review.id, Decision("edit", review.revision, review.version, body=edited_body)
    )
    message = _delivered(tmp_path)
    assert message["In-Reply-To"] is None and message["Bcc"] is None
    assert message["Reply-To"] == "team@us.example" and message["X-Campaign"] == "q3"
    body = message.get_body(preferencelist=("plain",))
    assert body is not None and _text(body) == sent.body_text == edited_body
    assert [a.get_filename() for a in message.iter_attachments()] == ["roi.pdf"]


async def test_a_reply_needs_a_known_parent(env: Env) -> None:
    draft = Draft(to=[], cc=[], bcc=[], subject="", body_text="hi", intent=INTENT)
    with pytest.raises(DomainError) as caught:
        await app.submit(
            env,
            AGENT,
            app.SubmitRequest(
                kind="reply", draft=draft, category_id="", idempotency_key="", parent_message_id="msg_nope"
            ),
        )
    assert caught.value.code is Code.NOT_FOUND


async def test_inbound_mail_threads_on_references(env: Env) -> None:
    first = await _inbound(env)
    second = await app.record_inbound(
        env,
        ADMIN,
        from_address="vp@acme.com",
        to=["sales@us.example"],
        cc=[],
        subject="Re: Q3",
        body_text="also",
        headers={"In-Reply-To": "<inbound-1@acme.com>"},
    )
    assert second.thread_ref == first.thread_ref and second.id != first.id


async def test_a_redelivered_inbound_message_is_recorded_once(env: Env) -> None:
    first, again = await _inbound(env), await _inbound(env)
    assert again.id == first.id and again.thread_ref == first.thread_ref


async def test_a_reply_to_our_own_sent_message_goes_to_its_recipients_not_to_us(
    env: Env, tmp_path: Path
) -> None:
    await app.set_policy(env, ADMIN, "allow_direct")
    first = Draft(
        to=["vp@acme.com"],
        cc=["cfo@acme.com"],
        bcc=[],
        subject="Q3 pilot",
        body_text="Following up.",
        intent=None,
        reply_to="team@us.example",  # ours too
    )
    _, sent = await app.submit(
        env, AGENT, app.SubmitRequest(kind="send", draft=first, category_id="", idempotency_key="")
    )
    assert sent.state.value == "auto_sent" and sent.message_id
    follow_up = Draft(to=[], cc=[], bcc=[], subject="", body_text="Any thoughts?", intent=None)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(
            kind="reply",
            draft=follow_up,
            category_id="",
            idempotency_key="",
            parent_message_id=sent.message_id,
        ),
    )
    assert (review.to, review.cc, review.from_address) == (
        ["vp@acme.com"],
        ["cfo@acme.com"],
        "agent@reviewloop.local",
    )


@pytest.mark.parametrize(
    ("headers", "to"), [({"Reply-To": "deals@acme.com"}, "deals@acme.com"), ({}, "vp@acme.com")]
)
async def test_a_reply_to_inbound_mail_goes_to_its_reply_to_else_its_from(
    env: Env, headers: dict[str, str], to: str
) -> None:
    parent = await _inbound(env, **headers)
    draft = Draft(to=[], cc=[], bcc=[], subject="", body_text="Sure.", intent=INTENT)
    _, review = await app.submit(
        env,
        AGENT,
        app.SubmitRequest(
            kind="reply", draft=draft, category_id="", idempotency_key="", parent_message_id=parent.id
        ),
    )
    assert review.to == [to] and review.cc == []


def test_reply_all_copies_the_parents_other_recipients_once_and_never_our_inbox() -> None:
    parent = Parent(
        message_id="msg_1",
        rfc_message_id="<a@acme.com>",
        references="",
        thread_ref="thread_1",
        from_address="vp@acme.com",
        to=["Sales@us.example", "cto@acme.com"],
        cc=["cfo@acme.com", "CTO@acme.com", "vp@acme.com"],
        subject="Q3",
        body_text="Pricing?",
        created_at=datetime(2026, 12, 3, tzinfo=UTC),
    )
    draft = Draft(to=[], cc=[], bcc=[], subject="", body_text="Thursday?", intent=INTENT)
    replied, _ = materialize("reply", draft, parent, reply_all=True, inbox="sales@us.example")
    assert (replied.to, replied.cc) == (["vp@acme.com"], ["cto@acme.com", "cfo@acme.com"])
    only_sender, _ = materialize("reply", draft, parent, inbox="sales@us.example")
    assert (only_sender.to, only_sender.cc) == (["vp@acme.com"], [])
    explicit, _ = materialize(
        "reply", Draft(**{**draft.__dict__, "to": ["ceo@acme.com"]}), parent, reply_all=True
    )
    assert (explicit.to, explicit.cc) == (["ceo@acme.com"], [])  # an explicit to replaces every derived one


_header_text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=120).filter(
    lambda s: s.strip()
)
_address = st.sampled_from(
    ["alice@example.org", "Bob <bob@example.net>", '"Doe, Jane" <jane@example.com>', "zoë@exämple.de"]
)
# Most messages are plain (bare addresses, ASCII words, short ASCII lines): the bytes written without
# the email package. The near misses (an encoded word, doubled spaces, a dot out of place) are not.
_bare_address = st.from_regex(r"[a-z0-9._+%-]{1,8}@[a-z0-9-]{1,6}(\.[a-z0-9-]{1,4}){1,2}", fullmatch=True)
_words = st.from_regex(r"[!-~]{1,12}( [!-~]{1,12}){0,7}", fullmatch=True)
_near_miss = st.sampled_from(["=?utf-8?q?hi?=", " leading", "two  spaces", "tab\there", "x" * 80])
_lines = st.lists(st.from_regex(r"[ -~\t]{0,82}", fullmatch=True), max_size=6).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(
    to=st.lists(_bare_address | _address, min_size=1, max_size=3),
    cc=st.lists(_bare_address | _address, max_size=2),
    subject=_words | _header_text | _near_miss,
    body=_lines | st.text(max_size=400) | st.sampled_from(["", "a\r\nb\rc\n\n", "x" * 79]),
    html=st.sampled_from([None, None, "<p>Hi</p>"]),
    extra=st.dictionaries(
        st.sampled_from(["X-Campaign", "Keywords", "Comments", "X_Odd", "Subject"]),
        _words | _header_text | _near_miss,
        max_size=2,
    ),
    attach=st.sampled_from([False, False, True]),
)
def test_the_delivered_bytes_are_the_stdlib_smtp_policys(
    to: list[str],
    cc: list[str],
    subject: str,
    body: str,
    html: str | None,
    extra: dict[str, str],
    attach: bool,
) -> None:
    """The message built with header classes made once, or written without the email package when it
    is plain, is byte for byte the stdlib's ``SMTP`` policy's."""
    fields: dict[str, Any] = dict(
        from_address="agent@example.com",
        to=to,
        cc=cc,
        subject=subject,
        body_text=body,
        body_html=html,
        reply_to="replies@example.com",
        headers=extra,
        attachments=[Attachment("a.txt", "text/plain", b"attached")] if attach else [],
        rfc_message_id="<msg_1@example.com>",
        in_reply_to="<parent@example.org>",
        references="<root@example.org> <parent@example.org>",
        date=datetime(2026, 12, 5, 12, 0, tzinfo=UTC),
    )
    try:
        ours: bytes | Exception = mime.build_message(mime.Outgoing(**fields))
    except Exception as error:  # the stdlib must refuse the same input the same way
        ours = error
    with patch.object(mime, "_POLICY", SMTP), patch.object(mime, "_plain_bytes", lambda *_: None):
        try:
            theirs: bytes | Exception = mime.build_message(mime.Outgoing(**fields))
        except Exception as error:
            theirs = error
    if isinstance(ours, Exception):
        assert type(ours) is type(theirs) and str(ours) == str(theirs)
    else:
        assert isinstance(theirs, bytes)
        boundary = re.compile(rb"={15}\d+==")  # a multipart boundary is random on every build
        assert boundary.sub(b"B", ours) == boundary.sub(b"B", theirs)


def test_a_plain_message_is_written_without_the_email_package() -> None:
    fields: dict[str, Any] = dict(
        from_address="agent@example.com",
        to=["vp@acme.com"],
        cc=[],
        subject="Q3 pilot",
        body_text="Let me know your thoughts.",
        body_html=None,
        reply_to=None,
        headers={"X-Campaign": "q3"},
        attachments=[],
        rfc_message_id="<msg_1@example.com>",
        in_reply_to=None,
        references=None,
        date=datetime(2026, 12, 5, 12, 0, tzinfo=UTC),
    )
    with patch.object(mime, "EmailMessage", side_effect=AssertionError("the email package was used")):
        plain = mime.build_message(mime.Outgoing(**fields))
        assert plain.endswith(b"\r\n\r\nLet me know your thoughts.\r\n")
        with pytest.raises(AssertionError):
            mime.build_message(mime.Outgoing(**{**fields, "body_html": "<p>Hi</p>"}))
