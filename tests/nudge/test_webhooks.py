"""Webhooks in the nudge service (issue 19, "Push"): each nudge POSTed to a real receiver on loopback,
signed (Standard Webhooks), retried in order, failed for good after its bound, secrets rotated with an
overlap, and no forbidden address reached (checked at registration and again at send time)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import ipaddress
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx
import orjson
import pytest
import standardwebhooks
from hypothesis import given
from hypothesis import strategies as st
from nudge import app, wakeup
from nudge.__main__ import SPEC
from nudge.app import webhooks
from nudge.bootstrap import NudgeEnvironment, webhook_settings
from nudge.domain.webhooks import backoff_s, sign
from reviewloop import ssrf
from reviewloop.client import WebhookVerificationError, verify_webhook
from reviewloop.errors import Code, DomainError
from reviewloop.service import ServiceSpec
from reviewloop.ssrf import parse_networks
from reviewloop.storage import Database, make_engine
from reviewloop.tenancy import ActorKind, Principal

from tests.nudge.factory import AGENT, event
from tests.receiver import RawReceiver, Receiver, raw_receiving, receiving

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
ADMIN = Principal(AGENT.org_id, AGENT.project_id, ActorKind.ADMIN, "adm_1")
# Another project of another org: the tenant a slow receiver must not hold up.
OTHER_AGENT = Principal("org_b", "prj_b", ActorKind.AGENT, "agt_b")
OTHER_ADMIN = Principal("org_b", "prj_b", ActorKind.ADMIN, "adm_b")
SETTINGS = webhooks.WebhookSettings(
    key=b"test-webhook-key",
    allowed_networks=parse_networks(["127.0.0.0/8"]),
    backoff_s=0.0,
    backoff_cap_s=0.0,
)


async def drain(db: Database, settings: webhooks.WebhookSettings, receiver: Receiver, count: int) -> None:
    """Run sender rounds until ``count`` requests reached the receiver (each round is deterministic)."""
    async with webhooks.http_client() as client:
        for _ in range(50):
            if len(receiver.received) >= count:
                return
            await webhooks.deliver_due(db, settings, client)
    raise AssertionError(f"{len(receiver.received)} of {count} requests arrived")


def verifies(secret: str, headers: dict[str, str], body: bytes, **kwargs: float) -> bool:
    try:
        verify_webhook(secret, headers, body, **kwargs)
    except WebhookVerificationError:
        return False
    return True


async def test_each_wanted_nudge_is_posted_signed_with_a_stable_id(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    async with receiving() as receiver:
        everything = await webhooks.register(db, SETTINGS, ADMIN, receiver.url, [])
        only_sent = await webhooks.register(db, SETTINGS, ADMIN, receiver.url + "?sent", ["sent"])
        assert everything.secret.startswith("whsec_") and everything.secret != only_sent.secret
        await app.ingest(db, [event("rr_1", "rejected"), event("rr_2", "sent")])
        await drain(db, SETTINGS, receiver, 3)
        for headers, body in receiver.received:
            data = orjson.loads(body)["data"]
            assert headers["webhook-id"] == data["id"] and data["id"].startswith("ndg_")
            assert headers["content-type"] == "application/json"
            assert any(verifies(s, headers, body) for s in (everything.secret, only_sent.secret))
            # and the Standard Webhooks library itself, as a receiver would run it, accepts it
            assert any(
                standardwebhooks.Webhook(s).verify(body, headers) == orjson.loads(body)
                for s in (everything.secret, only_sent.secret)
                if verifies(s, headers, body)
            )
            tampered = body.replace(b"rr_", b"rX_")
            assert not any(verifies(s, headers, tampered) for s in (everything.secret, only_sent.secret))
            old = {**headers, "webhook-timestamp": str(int(time.time()) - 3600)}
            assert not any(verifies(s, old, body) for s in (everything.secret, only_sent.secret))
        reasons = sorted(orjson.loads(b)["data"]["reason"] for _, b in receiver.received)
        assert reasons == ["rejected", "sent", "sent"]  # the "sent"-only endpoint got no "rejected"
        listed = await webhooks.deliveries(db, ADMIN, only_sent.endpoint.id, status="", limit=0)
        assert [(d.reason, d.status, d.attempts, d.last_status) for d in listed] == [
            ("sent", "delivered", 1, 200)
        ]


async def test_a_refused_delivery_is_retried_and_later_ones_wait_in_order(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    async with receiving() as receiver:
        hook = await webhooks.register(db, SETTINGS, ADMIN, receiver.url, [])
        receiver.statuses = [500, 503]
        await app.ingest(db, [event("rr_a", "rejected"), event("rr_b", "cancelled")])
        await drain(db, SETTINGS, receiver, 4)
        order = [orjson.loads(b)["data"]["review_id"] for _, b in receiver.received]
        assert order == ["rr_a", "rr_a", "rr_a", "rr_b"]  # the backlog in order once the receiver is back
        assert len({h["webhook-id"] for h, _ in receiver.received[:3]}) == 1  # one id across retries
        listed = await webhooks.deliveries(db, ADMIN, hook.endpoint.id, status="delivered", limit=10)
        assert [(d.review_id, d.attempts) for d in listed] == [("rr_b", 1), ("rr_a", 3)]


async def test_a_delivery_past_its_retry_bound_fails_visibly_and_the_next_goes(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    settings = dataclasses.replace(SETTINGS, retry_for=timedelta(0))
    async with receiving() as receiver:
        hook = await webhooks.register(db, settings, ADMIN, receiver.url, [])
        receiver.statuses = [500]
        await app.ingest(db, [event("rr_a", "rejected"), event("rr_b", "cancelled")])
        await drain(db, settings, receiver, 2)
    (failed,) = await webhooks.deliveries(db, ADMIN, hook.endpoint.id, status="failed", limit=10)
    assert (failed.review_id, failed.last_status, failed.last_error) == ("rr_a", 500, "HTTP 500")
    (delivered,) = await webhooks.deliveries(db, ADMIN, hook.endpoint.id, status="delivered", limit=10)
    assert delivered.review_id == "rr_b"


async def test_a_rotated_secret_signs_beside_the_new_one_for_its_overlap(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    async with receiving() as receiver:
        first = await webhooks.register(db, SETTINGS, ADMIN, receiver.url, [])
        second = await webhooks.rotate(db, SETTINGS, ADMIN, first.endpoint.id, 3600)
        assert second.secret_version == 2 and second.secret != first.secret
        await app.ingest(db, [event("rr_a", "rejected")])
        await drain(db, SETTINGS, receiver, 1)
        headers, body = receiver.received[-1]
        assert len(headers["webhook-signature"].split()) == 2
        assert verifies(first.secret, headers, body) and verifies(second.secret, headers, body)
        third = await webhooks.rotate(db, SETTINGS, ADMIN, first.endpoint.id, 0)  # no overlap: cut at once
        await app.ingest(db, [event("rr_b", "rejected")])
        await drain(db, SETTINGS, receiver, 2)
        headers, body = receiver.received[-1]
        assert verifies(third.secret, headers, body)
        assert not verifies(second.secret, headers, body) and not verifies(first.secret, headers, body)
    listed = await webhooks.list_endpoints(db, ADMIN)
    assert [(e.id, version) for e, version in listed] == [(first.endpoint.id, 3)]


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.7/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080/hook",
        "http://[::ffff:10.0.0.1]/hook",
        "http://0.0.0.0/hook",
        "http://localhost/hook",  # a name is resolved: loopback (::1 is outside the allowed 127.0.0.0/8)
        # IPv6 forms that carry an IPv4 address are judged by it (issue 36)
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data",  # NAT64 of 169.254.169.254
        "http://[2002:a9fe:a9fe::]/hook",  # 6to4 of 169.254.169.254
        "http://[::169.254.169.254]/hook",  # IPv4-compatible
        "http://[::ffff:0:a9fe:a9fe]/hook",  # IPv4-translated
        "http://[::ffff:169.254.169.254]/hook",  # IPv4-mapped
        "http://[64:ff9b::c0a8:101]/hook",  # NAT64 of 192.168.1.1
        "http://[64:ff9b:1::a9fe:a9fe]/hook",  # local-use NAT64
        "ftp://example.com/hook",
        "http://user:pw@example.com/hook",
    ],
)
async def test_a_webhook_to_a_forbidden_address_is_refused(open_db: OpenDb, url: str) -> None:
    db = await open_db(SPEC)
    strict = dataclasses.replace(SETTINGS, allowed_networks=())
    loopback = "localhost" in url
    for settings in (strict, SETTINGS) if not loopback else (strict,):
        with pytest.raises(DomainError) as refused:
            await webhooks.register(db, settings, ADMIN, url, [])
        assert refused.value.code is Code.BAD_REQUEST
    assert await webhooks.list_endpoints(db, ADMIN) == []


async def test_the_address_is_checked_again_at_send_time(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    async with receiving() as receiver:
        hook = await webhooks.register(db, SETTINGS, ADMIN, receiver.url, [])
        # The deployment withdrew its allowance (or the name now resolves elsewhere): nothing is sent.
        strict = dataclasses.replace(SETTINGS, allowed_networks=(), retry_for=timedelta(0))
        await app.ingest(db, [event("rr_a", "rejected")])
        async with httpx.AsyncClient() as client:
            assert await webhooks.deliver_due(db, strict, client) == 1
        assert receiver.received == []
    (failed,) = await webhooks.deliveries(db, ADMIN, hook.endpoint.id, status="failed", limit=10)
    assert failed.last_status is None and "loopback" in failed.last_error


@pytest.mark.parametrize("url", ["http://[::127.0.0.1]/hook", "http://[::ffff:127.0.0.1]:9/hook"])
async def test_an_ipv6_form_of_loopback_is_refused_unless_loopback_is_allowed(
    open_db: OpenDb, url: str
) -> None:
    db = await open_db(SPEC)
    with pytest.raises(DomainError) as refused:
        await webhooks.register(db, dataclasses.replace(SETTINGS, allowed_networks=()), ADMIN, url, [])
    assert "127.0.0.1" in refused.value.detail
    await webhooks.register(db, SETTINGS, ADMIN, url, [])  # judged as 127.0.0.1, which SETTINGS allows


@pytest.mark.parametrize(
    ("form", "carries"),
    [
        ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
        ("2002:a9fe:a9fe::", "169.254.169.254"),
        ("::169.254.169.254", "169.254.169.254"),
        ("::127.0.0.1", "127.0.0.1"),
        ("::ffff:10.0.0.1", "10.0.0.1"),
    ],
)
async def test_a_name_resolving_to_an_ipv6_form_of_a_forbidden_address_is_refused_at_send(
    open_db: OpenDb, monkeypatch: pytest.MonkeyPatch, form: str, carries: str
) -> None:
    """The name passed at registration; at the send it resolves (DNS rebinding) to an IPv6 address that
    carries a forbidden IPv4 one: nothing is sent, and the delivery log says which address and why."""
    db = await open_db(SPEC)
    strict = dataclasses.replace(SETTINGS, allowed_networks=(), retry_for=timedelta(0))
    answers = {"hooks.example.com": ["93.184.215.14"]}

    async def getaddrinfo(host: str, port: int) -> list[str]:
        return answers[host]

    monkeypatch.setattr(ssrf, "_getaddrinfo", getaddrinfo)
    hook = await webhooks.register(db, strict, ADMIN, "https://hooks.example.com/x", [])
    answers["hooks.example.com"] = ["93.184.215.14", form]
    with pytest.raises(DomainError):  # and a registration now is refused too
        await webhooks.register(db, strict, ADMIN, "https://hooks.example.com/y", [])
    await app.ingest(db, [event("rr_a", "rejected")])
    async with webhooks.http_client() as client:
        assert await webhooks.deliver_due(db, strict, client) == 1
    (failed,) = await webhooks.deliveries(db, ADMIN, hook.endpoint.id, status="failed", limit=10)
    assert failed.last_status is None and f"carries {carries}" in failed.last_error


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("8.8.8.8", False),
        ("2606:4700::1111", False),
        ("64:ff9b::808:808", False),  # NAT64 of a public address: reached
        ("2002:808:808::", False),  # 6to4 of a public address
        ("::ffff:8.8.8.8", False),
        ("64:ff9b::7f00:1", True),
        ("2002:7f00:1::", True),
        ("2002:a00:1::", True),
        ("::ffff:0:7f00:1", True),
        ("::", True),
        ("::1", True),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", True),  # Teredo
        ("fe80::1", True),
        ("fc00::1", True),
        ("100.64.0.1", True),
        ("224.0.0.1", True),
    ],
)
def test_the_ssrf_rule_judges_an_embedded_ipv4_address_by_itself(address: str, refused: bool) -> None:
    assert (ssrf.address_refusal(ipaddress.ip_address(address)) is not None) is refused


async def test_unknown_reasons_and_another_projects_webhook_are_refused(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    with pytest.raises(DomainError) as refused:
        await webhooks.register(db, SETTINGS, ADMIN, "https://hooks.example.com/x", ["approved"])
    assert refused.value.code is Code.BAD_REQUEST
    hook = await webhooks.register(db, SETTINGS, ADMIN, "https://hooks.example.com/x", [])
    other = Principal(AGENT.org_id, "prj_other", ActorKind.ADMIN, "adm_1")
    for call in (
        webhooks.rotate(db, SETTINGS, other, hook.endpoint.id, 0),
        webhooks.delete(db, other, hook.endpoint.id),
        webhooks.deliveries(db, other, hook.endpoint.id, status="", limit=0),
    ):
        with pytest.raises(DomainError) as missing:
            await call
        assert missing.value.code is Code.NOT_FOUND
    await webhooks.delete(db, ADMIN, hook.endpoint.id)
    assert await webhooks.list_endpoints(db, ADMIN) == []


async def test_two_senders_deliver_each_nudge_once_and_in_order(open_db: OpenDb) -> None:
    """Two replicas' senders race on one store: the endpoint claim lets one at a time send."""
    db = await open_db(SPEC)
    other = db if db.is_sqlite else Database(make_engine(db.engine.url.render_as_string(hide_password=False)))
    try:
        async with receiving() as receiver:
            await webhooks.register(db, SETTINGS, ADMIN, receiver.url, [])
            await app.ingest(db, [event(f"rr_{n}", "rejected") for n in range(6)])
            async with webhooks.http_client() as client:
                while len(receiver.received) < 6:
                    await asyncio.gather(
                        webhooks.deliver_due(db, SETTINGS, client),
                        webhooks.deliver_due(other, SETTINGS, client),
                    )
        order = [orjson.loads(b)["data"]["review_id"] for _, b in receiver.received]
        assert order == [f"rr_{n}" for n in range(6)]
    finally:
        if other is not db:
            await other.dispose()


@given(attempts=st.integers(1, 60), base=st.floats(0.01, 10), cap=st.floats(0.01, 3600))
def test_the_backoff_grows_is_capped_and_jittered_within_its_bounds(
    attempts: int, base: float, cap: float
) -> None:
    ceiling = min(cap, base * 2.0 ** (attempts - 1))
    assert ceiling / 2 <= backoff_s(attempts, base, cap) <= ceiling


async def test_compaction_forgets_finished_deliveries_and_keeps_pending_ones(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    settings = dataclasses.replace(SETTINGS, retry_for=timedelta(0))
    async with receiving() as receiver:
        done = await webhooks.register(db, settings, ADMIN, receiver.url, ["rejected"])
        await app.ingest(db, [event("rr_a", "rejected")])
        await drain(db, settings, receiver, 1)
    waiting = await webhooks.register(db, settings, ADMIN, "https://hooks.example.com/x", ["cancelled"])
    await app.ingest(db, [event("rr_b", "cancelled")])  # pending for the second endpoint (never sent here)
    await app.compact(db, retention=timedelta(days=7), inbox_retention=timedelta(0))
    assert await webhooks.deliveries(db, ADMIN, done.endpoint.id, status="", limit=0) == []
    (pending,) = await webhooks.deliveries(db, ADMIN, waiting.endpoint.id, status="", limit=0)
    assert pending.status == "pending"


def test_signatures_match_the_standard_webhooks_reference_vector() -> None:
    """The example of the Standard Webhooks specification: any receiver library of the scheme verifies
    what we sign, and our verifier accepts what they sign."""
    secret, msg_id, stamp, body = (
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )
    signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert sign([secret], msg_id, stamp, body) == signature
    headers = {
        "Webhook-Id": msg_id,
        "Webhook-Timestamp": str(stamp),
        "Webhook-Signature": f"v1,bm9wZQ== {signature}",
    }
    verify_webhook(secret, headers, body, now=stamp + 10)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, headers, body, now=stamp + 301)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, headers, body + b" ", now=stamp)


def test_verify_webhook_is_the_standard_webhooks_librarys_check() -> None:
    """The client verifies as the library does: its error is the library's (a receiver catching that
    catches ours), and a secret in unpadded base64, as other Standard Webhooks senders issue them,
    verifies."""
    assert issubclass(WebhookVerificationError, standardwebhooks.WebhookVerificationError)
    key = bytes(range(16))  # base64 of 16 bytes ends in "=="; the unpadded form drops them
    unpadded = "whsec_" + base64.b64encode(key).decode().rstrip("=")
    msg_id, stamp, body = "msg_1", int(time.time()), b'{"ok": true}'
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": standardwebhooks.Webhook(key).sign(
            msg_id, datetime.fromtimestamp(stamp, UTC), body
        ),
    }
    verify_webhook(unpadded, headers, body)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verify_webhook(unpadded, headers, body + b" ")
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verify_webhook(
            unpadded, {**headers, "webhook-signature": "v1a," + headers["webhook-signature"][3:]}, body
        )


async def test_a_changed_webhook_key_is_named_instead_of_signing_wrongly(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    rekeyed = dataclasses.replace(SETTINGS, key=b"another-key", retry_for=timedelta(0))
    async with receiving() as receiver:
        hook = await webhooks.register(db, SETTINGS, ADMIN, receiver.url, [])
        await app.ingest(db, [event("rr_a", "rejected")])
        async with webhooks.http_client() as client:
            assert await webhooks.deliver_due(db, rekeyed, client) == 1
        assert receiver.received == []
        (failed,) = await webhooks.deliveries(db, ADMIN, hook.endpoint.id, status="failed", limit=10)
        assert failed.last_error == webhooks.KEY_CHANGED
        rotated = await webhooks.rotate(db, rekeyed, ADMIN, hook.endpoint.id, 3600)
        await app.ingest(db, [event("rr_b", "rejected")])
        await drain(db, rekeyed, receiver, 1)
        headers, body = receiver.received[0]
        assert headers["webhook-signature"].count("v1,") == 1  # the old key's secret cannot sign
        assert verifies(rotated.secret, headers, body) and not verifies(hook.secret, headers, body)


async def test_an_org_wide_broadcast_reaches_the_endpoints_of_every_project_of_the_org(
    open_db: OpenDb,
) -> None:
    from tests.nudge.test_broadcasts import broadcast, category_broadcast, rule_broadcast

    db = await open_db(SPEC)
    sibling = Principal(AGENT.org_id, "prj_2", ActorKind.ADMIN, "adm_2")
    other_org = Principal("org_2", AGENT.project_id, ActorKind.ADMIN, "adm_3")
    async with receiving() as receiver:
        for admin, path, reasons in (
            (ADMIN, "?mine", ["rule_changed"]),
            (sibling, "?sibling", []),
            (other_org, "?other", []),
            (ADMIN, "?recheck", ["recheck_category"]),
        ):
            await webhooks.register(db, SETTINGS, admin, receiver.url + path, reasons)
        await app.ingest(
            db, [broadcast(rule_broadcast("org-wide", project_id="")), broadcast(category_broadcast())]
        )
        await drain(db, SETTINGS, receiver, 3)
        async with webhooks.http_client() as client:  # one more round: nothing else is due
            assert await webhooks.deliver_due(db, SETTINGS, client) == 0
    got = sorted((h["webhook-id"], orjson.loads(b)["data"]["reason"]) for h, b in receiver.received)
    ids = {e.reason: e.id for e in (await app.list_events(db, AGENT, limit=10, cursor=""))[0]}
    assert got == sorted(
        [
            (ids["rule_changed"], "rule_changed"),  # mine
            (ids["rule_changed"], "rule_changed"),  # the sibling project's
            (ids["recheck_category"], "recheck_category"),  # prj_1's, asked for by name
        ]
    )


async def test_the_sender_is_woken_only_by_a_nudge_that_queued_a_delivery(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    with wakeup.doorbell(db).waiter(wakeup.SENDER) as rung:
        await app.ingest(db, [event("rr_w1", "rejected")])  # no endpoint wants it: nothing to send
        assert not rung.is_set()
        async with receiving() as receiver:
            await webhooks.register(db, SETTINGS, ADMIN, receiver.url, ["sent"])
            await app.ingest(db, [event("rr_w2", "rejected")])  # the endpoint wants only "sent"
            assert not rung.is_set()
            await app.ingest(db, [event("rr_w3", "sent")])
            assert rung.is_set()


@asynccontextmanager
async def sending(db: Database, settings: webhooks.WebhookSettings) -> AsyncIterator[None]:
    """The production sender loop, running beside the test."""
    task = asyncio.create_task(webhooks.deliver_forever(db, settings))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def attempts_of(db: Database, endpoint_id: str) -> int:
    return sum(d.attempts for d in await webhooks.deliveries(db, ADMIN, endpoint_id, status="", limit=10))


DRIPS = {
    # issue 36's receiver: 200 at once, then the body a byte at a time, each gap under any per-read timeout
    "200 then a byte every second": b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n",
    "500 then a byte every second": b"HTTP/1.1 500 Oops\r\ncontent-length: 1000000\r\n\r\nbusy ",
    "the headers a byte every second": b"HTTP/1.1 200 OK\r\nx-drip: ",
}


@pytest.mark.parametrize("head", DRIPS.values(), ids=DRIPS.keys())
async def test_a_dripping_receiver_delays_only_its_own_deliveries(open_db: OpenDb, head: bytes) -> None:
    """Project A's receiver drips its answer; project B's delivery, queued while A's attempt hangs,
    arrives at once, and A's attempt ends by its deadline (connect, headers and body together)."""
    db = await open_db(SPEC)
    settings = dataclasses.replace(SETTINGS, timeout_s=3.0, poll_s=0.2, backoff_s=60.0, backoff_cap_s=60.0)
    async with raw_receiving(RawReceiver(head=head, drip=b"x", gap_s=1.0)) as slow, receiving() as other:
        slow_hook = await webhooks.register(db, settings, ADMIN, slow.url, [])
        await webhooks.register(db, settings, OTHER_ADMIN, other.url, [])
        async with sending(db, settings):
            await app.ingest(db, [event("rr_a", "rejected")])
            await asyncio.wait_for(slow.arrived.wait(), 5)
            queued = time.monotonic()
            await app.ingest(db, [event("rr_b", "rejected", principal=OTHER_AGENT)])
            await other.until(1, timeout_s=2 * settings.timeout_s)
            delay = time.monotonic() - queued
            # the slow attempt itself is over by its deadline (the sender's record of it says so)
            async with asyncio.timeout(settings.timeout_s + 1):
                while await attempts_of(db, slow_hook.endpoint.id) == 0:  # noqa: ASYNC110 - the store's record
                    await asyncio.sleep(0.05)
            held = time.monotonic() - queued
            await asyncio.wait_for(slow.closed.wait(), 2 * slow.gap_s + 1)  # and its connection closed
    print(f"other project's delivery after {delay * 1000:.0f} ms; the slow attempt ended after {held:.1f} s")
    assert delay < 1.0  # on time: not after the slow attempt's 3 s deadline
    (attempt,) = await webhooks.deliveries(db, ADMIN, slow_hook.endpoint.id, status="", limit=10)
    if head.startswith(b"HTTP/1.1 200 OK\r\ncontent"):
        assert (attempt.status, attempt.last_status, attempt.last_error) == ("delivered", 200, None)
    elif head.startswith(b"HTTP/1.1 500"):
        assert (attempt.status, attempt.last_status) == ("pending", 500)
        assert attempt.last_error.startswith("HTTP 500: busy x") and "3 s deadline" in attempt.last_error
    else:
        assert (attempt.status, attempt.last_status) == ("pending", None)
        assert attempt.last_error == "no answer within the 3 s deadline"


async def test_attempts_in_flight_are_bounded_per_endpoint_and_in_all(open_db: OpenDb) -> None:
    """Three projects' receivers hang on their answers, two deliveries queued for each, two attempts
    allowed at once: two endpoints get one attempt each (never a second behind it: order), the third
    waits for a slot, which the deadline frees."""
    db = await open_db(SPEC)
    settings = dataclasses.replace(
        SETTINGS, timeout_s=2.0, poll_s=0.1, max_in_flight=2, backoff_s=60.0, backoff_cap_s=60.0
    )
    hang = b"HTTP/1.1 200 OK\r\nx-drip: "
    async with (
        raw_receiving(RawReceiver(head=hang, drip=b"x", gap_s=0.5)) as a,
        raw_receiving(RawReceiver(head=hang, drip=b"x", gap_s=0.5)) as b,
        raw_receiving(RawReceiver(head=hang, drip=b"x", gap_s=0.5)) as c,
    ):
        receivers = (a, b, c)
        for n, receiver in enumerate(receivers):
            await webhooks.register(
                db, settings, Principal("org_b", f"prj_{n}", ActorKind.ADMIN, "adm"), receiver.url, []
            )
        agents = [Principal("org_b", f"prj_{n}", ActorKind.AGENT, "agt") for n in range(3)]
        async with sending(db, settings):
            await app.ingest(
                db, [event(f"rr_{n}{k}", "rejected", principal=agents[n]) for n in range(3) for k in range(2)]
            )
            await asyncio.sleep(settings.timeout_s / 2)
            assert sorted(r.requests for r in receivers) == [0, 1, 1]
            async with asyncio.timeout(settings.timeout_s + 2):
                while any(r.requests == 0 for r in receivers):  # noqa: ASYNC110 - counted by the receivers
                    await asyncio.sleep(0.05)
            assert [r.requests for r in receivers] == [1, 1, 1]  # the second deliveries wait (backoff, order)


@pytest.mark.parametrize("status", [200, 500])
async def test_a_huge_answer_is_read_no_further_than_its_prefix(open_db: OpenDb, status: int) -> None:
    """A 64 MiB answer: the sender reads a 512-byte prefix (a 2xx: nothing), closes, and its memory
    stays bounded; the receiver could not push the rest."""
    db = await open_db(SPEC)
    size = 64 * 1024 * 1024
    settings = dataclasses.replace(SETTINGS, retry_for=timedelta(0))
    head = f"HTTP/1.1 {status} X\r\ncontent-length: {size}\r\n\r\n".encode()
    async with raw_receiving(RawReceiver(head=head, body_bytes=size)) as huge:
        hook = await webhooks.register(db, settings, ADMIN, huge.url, [])
        await app.ingest(db, [event("rr_a", "rejected")])
        async with webhooks.http_client() as client:
            tracemalloc.start()
            try:
                assert await webhooks.deliver_due(db, settings, client) == 1
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        await asyncio.wait_for(huge.closed.wait(), 5)
    print(f"peak traced memory {peak / 2**20:.1f} MiB; the receiver pushed {huge.sent / 2**20:.1f} MiB")
    assert peak < 8 * 2**20  # the whole answer would be 64 MiB
    assert huge.sent < size / 4  # the socket's buffers, not the answer
    (attempt,) = await webhooks.deliveries(db, ADMIN, hook.endpoint.id, status="", limit=10)
    if status == 200:
        assert (attempt.status, attempt.last_error) == ("delivered", None)
    else:
        assert attempt.last_error == "HTTP 500: " + "x" * settings.answer_prefix_bytes


def test_the_sender_settings_keep_an_attempt_inside_its_claim() -> None:
    read = webhook_settings(
        NudgeEnvironment.from_env(
            {
                "REVIEWLOOP_WEBHOOK_KEY": "k",
                "REVIEWLOOP_WEBHOOK_TIMEOUT_S": "2.5",
                "REVIEWLOOP_WEBHOOK_MAX_IN_FLIGHT": "4",
                "REVIEWLOOP_WEBHOOK_ANSWER_PREFIX_BYTES": "64",
            }
        )
    )
    assert (read.timeout_s, read.max_in_flight, read.answer_prefix_bytes) == (2.5, 4, 64)
    with pytest.raises(ValueError, match="timeout"):
        webhook_settings(
            NudgeEnvironment.from_env({"REVIEWLOOP_WEBHOOK_KEY": "k", "REVIEWLOOP_WEBHOOK_TIMEOUT_S": "45"})
        )
    with pytest.raises(ValueError, match="timeout"):
        webhooks.WebhookSettings(timeout_s=30.0, lease_s=60.0)
    with pytest.raises(ValueError, match="in flight"):
        webhooks.WebhookSettings(max_in_flight=0)
