"""``make chaos``: lifecycles on PostgreSQL while random processes are SIGKILLed and restarted.

Outside ``make test`` (pytest collects no ``test_*.py`` here). Every service and the gateway run as real
processes on fresh PostgreSQL databases, mail goes to a real aiosmtpd sink whose Sent folder is served
over IMAP (a relay that keeps a copy, so a send whose answer a kill lost is recovered by evidence). A
client drives each review the way an operator's agent would: it re-reads the review, acts on its state,
and retries a lost answer with the same Idempotency-Key; an on-call operator closes a delivery parked for
30 s (a kill between the DATA journal and the relay's answer, which the Sent folder cannot settle when
the relay never got it) by the relay's record, through the console's ``resolve_delivery``. Besides the random kills, it kills the caller of an in-flight call (issue 34): it
watches a receiver's database for an ``Ingest`` unit of work under way and SIGKILLs the service whose
relay sent it (review_state's relay into nudge and rules, rules' into review_state), so grpc.aio cancels
the receiver's handler mid-unit. After the load and a quiet minute it checks: no review lost, doubled, or
left approved / pending; every sent review delivered exactly once (messages in the sink by Message-ID);
exactly one terminal nudge per review, as the agent lists them and as nudge's store holds them (every
``sent``/``auto_sent``/``cancelled``/``failed`` review in review_state's store); every outbox row marked
delivered is in its receiver's inbox. Prints the numbers; exits 1 on a failed check.

With ``--target all`` the stack runs in monolithic mode (``reviewloop up --target all``: every part in one
process, the contexts calling each other in process): every kill, random or of an in-flight Ingest's
caller, takes the whole process down at once (sender and receiver of that Ingest alike), and the same
checks say whether anything was lost or doubled across those restarts.

    REVIEWLOOP_TEST_POSTGRES=postgresql://... python -m tests.chaos [--seconds 150] [--workers 4] [--target all]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import email
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from email.policy import default
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from aiosmtpd.controller import Controller
from sqlalchemy.engine import make_url
from stack.launcher import MONOLITH, Stack, free_port
from stack.topology import ALL

from tests.conftest import ADMIN_TOKEN, PG_ENV, Databases, draft, start_stack
from tests.imap_server import ImapServer

TERMINAL = {"sent", "send_failed", "cancelled"}
OPEN = {"needs_review", "in_review", "chatting", "rejected", "approved"}


class Sink:
    """The SMTP sink: every message it accepted, as bytes."""

    def __init__(self) -> None:
        self.received: list[bytes] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.received.append(envelope.original_content)
        return "250 OK"

    def message_ids(self) -> Counter[str]:
        return Counter(
            str(email.message_from_bytes(raw, policy=default)["Message-ID"]) for raw in self.received
        )


class Client:
    """The gateway over HTTP, retrying what a dead process lost (same Idempotency-Key)."""

    def __init__(self, base: str, stats: Counter[str]) -> None:
        self.http = httpx.AsyncClient(base_url=base, timeout=30)
        self.stats = stats

    async def call(
        self, method: str, path: str, headers: dict[str, str], key: str = "", **kwargs: Any
    ) -> httpx.Response:
        if key:
            headers = {**headers, "Idempotency-Key": key}
        start = time.monotonic()
        while True:
            try:
                response = await self.http.request(method, path, headers=headers, **kwargs)
            except httpx.HTTPError:
                self.stats["transport_errors_retried"] += 1
            else:
                if still_running(response):
                    # A gateway killed mid-request may leave its key pending; past 20 s the caller
                    # re-derives and moves on with a new key.
                    if time.monotonic() - start > 20:
                        self.stats["idempotency_key_pending_20s"] += 1
                        return response
                elif response.status_code < 500:
                    return response
                self.stats[f"http_{response.status_code}_retried"] += 1
            if time.monotonic() - start > 180:
                raise RuntimeError(f"{method} {path} kept failing for 180 s")
            await asyncio.sleep(0.3)


def still_running(response: httpx.Response) -> bool:
    return response.status_code == 409 and "still running" in response.text


class Run:
    def __init__(self, client: Client, seed: int) -> None:
        self.client = client
        self.rng = random.Random(seed)
        self.reviews: dict[str, dict[str, Any]] = {}  # review id -> {plan, project, subject}
        self.submitted: Counter[str] = Counter()
        self.stuck: list[str] = []
        # Set when a decision or cancel was answered: review_state has just committed nudges, and its
        # relay is sending them to nudge's Ingest.
        self.answered = asyncio.Event()

    async def setup(self) -> None:
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        self.projects: dict[str, dict[str, Any]] = {}
        for name, policy in (("reviewed", "require_review"), ("direct", "allow_direct")):
            project = (
                await self.client.call("POST", "/v1/admin/projects", admin, json={"name": name})
            ).json()
            keys = {}
            for kind in ("agent", "human"):
                issued = await self.client.call(
                    "POST",
                    "/v1/admin/api-keys",
                    admin,
                    json={"project_id": project["project_id"], "actor_kind": kind},
                )
                keys[kind] = {"Authorization": f"Bearer {issued.json()['api_key']}"}
            await self.client.call(
                "PUT",
                f"/v1/admin/projects/{project['project_id']}/review-policy",
                admin,
                json={"policy": policy},
            )
            self.projects[name] = {"id": project["project_id"], **keys}

    async def lifecycle(self, i: int, tag: str) -> None:
        plan = self.rng.choice(["approve"] * 5 + ["edit"] * 2 + ["reject"] * 2 + ["direct"] * 2)
        project = self.projects["direct" if plan == "direct" else "reviewed"]
        agent, human = project["agent"], project["human"]
        subject = f"chaos {tag} {i}"
        body = draft(subject=subject) if plan != "direct" else draft(subject=subject, intent=None)
        if plan == "direct":
            body.pop("intent")
        answer = await self.client.call("POST", "/v1/messages", agent, key=f"s-{tag}-{i}", json=body)
        if still_running(answer):  # re-derive: did the first submit land?
            mine = await all_pages(self.client, "/v1/reviews", human, "items")
            found = [r["id"] for r in mine if r["subject"] == subject]
            if not found:
                answer = await self.client.call(
                    "POST", "/v1/messages", agent, key=f"s-{tag}-{i}-again", json=body
                )
        if found_id := (found[0] if still_running(answer) and found else ""):
            review_id = found_id
        elif answer.status_code != 202:
            self.client.stats[f"submit_{answer.status_code}"] += 1
            return
        else:
            review_id = answer.json()["review_id"]
        self.submitted[subject] += 1
        self.reviews[review_id] = {"plan": plan, "project": project, "subject": subject}
        deadline = time.monotonic() + 240
        salt = 0  # bumped when a key stays pending: the next try of that step gets a new key
        while time.monotonic() < deadline:
            review = (await self.client.call("GET", f"/v1/reviews/{review_id}", agent)).json()
            state, rev, ver = review["state"], review["revision"], review["version"]
            base = f"/v1/reviews/{review_id}"
            if state in ("sent", "auto_sent", "cancelled"):
                return
            if state in ("failed", "rejected"):
                step = ("cancel", agent, f"c-{tag}-{i}-{ver}-{salt}", {"parent_revision": rev})
            elif state == "needs_review":
                step = ("open", human, f"o-{tag}-{i}-{ver}-{salt}", {"revision": rev, "version": ver})
            elif state in ("in_review", "chatting"):
                decision: dict[str, Any] = {"action": "approve", "revision": rev, "version": ver}
                if plan == "edit":
                    decision.update(action="edit", body=f"Edited for {subject}.")
                elif plan == "reject":
                    decision.update(action="reject", feedback="not now")
                step = ("decision", human, f"d-{tag}-{i}-{ver}-{salt}", decision)
            else:  # approved: its delivery is under way
                await asyncio.sleep(0.5)
                continue
            verb, headers, key, json_body = step
            done = await self.client.call("POST", f"{base}/{verb}", headers, key=key, json=json_body)
            if verb != "open" and done.status_code < 300:
                self.answered.set()
            salt += still_running(done)
        self.stuck.append(review_id)

    async def worker(self, n: int, until: float) -> None:
        i = 0
        while time.monotonic() < until:
            await self.lifecycle(i, f"w{n}")
            i += 1


# A relay's caller and the receiver whose Ingest it calls (the outbox destinations between services).
INGEST_EDGES = (("review_state", "nudge"), ("review_state", "rules"), ("rules", "review_state"))
# The receiver's sessions in a unit of work (a statement running, or a transaction open between them).
_IN_UNIT = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()"
    " AND xact_start IS NOT NULL AND state <> 'idle'"
)


def dsn(stack: Stack, name: str) -> str:
    """The asyncpg DSN of service ``name``'s database."""
    url = make_url(stack.env[f"REVIEWLOOP_{name.upper()}_DB"])
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def monolithic(stack: Stack) -> bool:
    """Whether the stack is one process (``--target all``)."""
    return MONOLITH in stack.procs


def start_again(stack: Stack, name: str) -> None:
    """Start process ``name`` (a part, or the monolith) again."""
    if name == MONOLITH:
        stack.start_monolith()
    else:
        stack.start(name)


async def kill_and_restart(stack: Stack, name: str, rng: random.Random, lock: asyncio.Lock) -> str:
    """SIGKILL the process running part ``name`` (no shutdown hook runs), then start it again once it is
    serving; the name of the process killed ("" if it was not running). In monolithic mode that is the
    one process of every part."""
    async with lock:
        process = MONOLITH if monolithic(stack) else name
        proc = stack.procs.get(process)
        if proc is None or proc.poll() is not None:
            return ""
        proc.kill()
        proc.wait()
        await asyncio.sleep(rng.uniform(0.0, 1.5))
        start_again(stack, process)
        await stack.wait_serving(ALL if process == MONOLITH else [name], 180)
        return process


async def killer(
    stack: Stack, until: float, rng: random.Random, kills: Counter[str], focus: str, lock: asyncio.Lock
) -> None:
    while time.monotonic() < until:
        await asyncio.sleep(rng.uniform(2.0, 6.0))
        name = focus if focus and rng.random() < 0.5 else rng.choice(ALL)
        if killed := await kill_and_restart(stack, name, rng, lock):
            kills[killed] += 1


async def caller_killer(
    stack: Stack,
    run: Run,
    until: float,
    rng: random.Random,
    kills: Counter[str],
    lock: asyncio.Lock,
    every_s: float,
) -> None:
    """Kill the caller of an in-flight ``Ingest``, so grpc.aio cancels the receiver's handler mid-unit.

    Two ways, in turn: right after a decision or cancel is answered (review_state's relay is then sending
    its nudges: killed 0-15 ms later, the handler is cancelled anywhere from its first await on); or once
    a receiver's database shows a unit of work under way (the relay's batch being stored), killing the
    relay's service.
    """
    watched = {receiver: await asyncpg.connect(dsn(stack, receiver)) for _, receiver in INGEST_EDGES}
    try:
        while time.monotonic() < until:
            await asyncio.sleep(rng.uniform(0.5, 1.5) * every_s)
            if rng.random() < 0.5:
                run.answered.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(run.answered.wait(), 5)
                    await asyncio.sleep(rng.uniform(0.0, 0.015))
                    if killed := await kill_and_restart(stack, "review_state", rng, lock):
                        kills[f"{killed}_after_an_answer"] += 1
                continue
            caller, receiver = rng.choice(INGEST_EDGES[:1] * 3 + INGEST_EDGES[1:])  # mostly the nudges
            database = make_url(stack.env[f"REVIEWLOOP_{receiver.upper()}_DB"]).database
            give_up = time.monotonic() + 5
            while time.monotonic() < give_up:
                if await watched[receiver].fetchval(_IN_UNIT, database):
                    if killed := await kill_and_restart(stack, caller, rng, lock):
                        kills[f"{killed}_mid_ingest_to_{receiver}"] += 1
                    break
                await asyncio.sleep(0.002)
    finally:
        for conn in watched.values():
            await conn.close()


async def operator(run: Run, sink: Sink, stop: asyncio.Event, stats: Counter[str]) -> None:
    """The on-call operator: a delivery parked for reconciliation for 30 s is closed by the relay's own
    record (the sink, by subject): "mark delivered" if it is there, else "mark failed"."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 5)
        relayed = {str(email.message_from_bytes(raw, policy=default)["Subject"]) for raw in sink.received}
        for project in run.projects.values():
            listed = await run.client.call(
                "GET", "/v1/reviews", project["human"], params={"state": "approved"}
            )
            for review in listed.json()["items"]:
                path = f"/v1/reviews/{review['id']}"
                delivery = (await run.client.call("GET", path, project["human"])).json().get("delivery") or {}
                if delivery.get("status") != "send_needs_reconciliation":
                    continue
                parked = datetime.fromisoformat(delivery["parked_at"].replace("Z", "+00:00"))
                if datetime.now(UTC) - parked < timedelta(seconds=30):
                    continue
                outcome = "delivered" if review["subject"] in relayed else "failed"
                answer = await run.client.call(
                    "POST",
                    f"/v1/admin/projects/{project['id']}/reviews/{review['id']}/delivery-resolution",
                    admin,
                    json={"outcome": outcome, "reason": f"chaos operator: relay log says {outcome}"},
                )
                stats[f"operator_marked_{outcome}_{answer.status_code}"] += 1


async def all_pages(client: Client, path: str, headers: dict[str, str], field: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = ""
    while True:
        params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = (await client.call("GET", path, headers, params=params)).json()
        items += page[field]
        cursor = page.get("next_cursor") or ""
        if not cursor:
            return items


STORED_TERMINAL = ("sent", "auto_sent", "cancelled", "failed")
TERMINAL_REASONS = ("sent", "send_failed", "cancelled")


async def check_stores(stack: Stack) -> dict[str, Any]:
    """What the stores hold: every closed review's terminal nudges in nudge's store (one; two for a failed
    send then cancelled), and every outbox row marked delivered in its receiver's inbox."""
    conns = {
        name: await asyncpg.connect(dsn(stack, name)) for name in ("review_state", "rules", "nudge", "diff")
    }
    try:
        closed = {
            r["id"]: r["state"]
            for r in await conns["review_state"].fetch(
                "SELECT id, state FROM reviews WHERE state = ANY($1::text[])", list(STORED_TERMINAL)
            )
        }
        stored: dict[str, list[str]] = {}
        for row in await conns["nudge"].fetch(
            "SELECT review_id, reason FROM nudges WHERE reason = ANY($1::text[]) ORDER BY seq",
            list(TERMINAL_REASONS),
        ):
            stored.setdefault(row["review_id"], []).append(row["reason"])
        not_one = {}
        for review_id, state in closed.items():
            reasons = stored.get(review_id, [])
            if reasons != [_TERMINAL_OF[state]] and not (
                state == "cancelled" and reasons == ["send_failed", "cancelled"]
            ):
                not_one[review_id] = {"state": state, "terminal_nudges": reasons}
        delivered: Counter[str] = Counter()
        missing: dict[str, list[str]] = {}
        for sender, conn in conns.items():
            rows = await conn.fetch(
                "SELECT destination, event_id FROM outbox WHERE delivered_at IS NOT NULL AND dead_at IS NULL"
            )
            by_destination: dict[str, list[str]] = {}
            for row in rows:
                by_destination.setdefault(row["destination"], []).append(row["event_id"])
            for destination, ids in by_destination.items():
                delivered[f"{sender}->{destination}"] += len(ids)
                if destination not in conns:
                    continue
                received = {
                    r["event_id"]
                    for r in await conns[destination].fetch(
                        "SELECT event_id FROM inbox WHERE event_id = ANY($1::text[])", ids
                    )
                }
                if lost := sorted(set(ids) - received):
                    missing[f"{sender}->{destination}"] = lost
        return {
            "closed_reviews_in_store": len(closed),
            "outbox_rows_delivered": dict(delivered),
            "closed_without_one_stored_terminal_nudge": not_one,
            "delivered_not_in_receivers_inbox": missing,
        }
    finally:
        for conn in conns.values():
            await conn.close()


_TERMINAL_OF = {"sent": "sent", "auto_sent": "sent", "cancelled": "cancelled", "failed": "send_failed"}


async def check(run: Run, sink: Sink) -> dict[str, Any]:
    listed: dict[str, dict[str, Any]] = {}
    reader: dict[str, dict[str, str]] = {}
    events: list[dict[str, Any]] = []
    for project in run.projects.values():
        for review in await all_pages(run.client, "/v1/reviews", project["human"], "items"):
            listed[review["id"]] = review
            reader[review["id"]] = project["human"]
        events += await all_pages(run.client, "/v1/review-events", project["agent"], "events")
    subjects = Counter(r["subject"] for r in listed.values())
    states = Counter(r["state"] for r in listed.values())
    lost = sorted(set(run.reviews) - set(listed))
    doubled = sorted(s for s, n in subjects.items() if n > 1)
    left = {}
    for review_id, review in listed.items():
        if review["state"] in OPEN:
            read = (await run.client.call("GET", f"/v1/reviews/{review_id}", reader[review_id])).json()
            left[review_id] = {"state": review["state"], "delivery": read.get("delivery")}
    tries: Counter[int] = Counter()
    for review_id, review in listed.items():
        if review["state"] in ("sent", "auto_sent"):
            read = (await run.client.call("GET", f"/v1/reviews/{review_id}", reader[review_id])).json()
            tries[read["delivery"]["tries"]] += 1
    delivered = sink.message_ids()
    sent = {rid: r for rid, r in listed.items() if r["state"] in ("sent", "auto_sent")}
    expected = {f"<{r['message_id']}@{r['from_address'].rpartition('@')[2]}>": rid for rid, r in sent.items()}
    not_once = {rid: delivered.get(mid, 0) for mid, rid in expected.items() if delivered.get(mid, 0) != 1}
    unrecorded = sorted(mid for mid in delivered if mid not in expected)
    terminal = Counter(e["review_id"] for e in events if e["reason"] in TERMINAL)
    reasons_of: dict[str, list[str]] = {}
    for e in events:
        reasons_of.setdefault(e["review_id"], []).append(e["reason"])
    failed_then_cancelled = {
        rid for rid, rs in reasons_of.items() if rs.count("send_failed") and rs.count("cancelled")
    }
    not_one_terminal = {
        rid: reasons_of.get(rid, [])
        for rid in listed
        if terminal.get(rid, 0) != (2 if rid in failed_then_cancelled else 1)
    }
    return {
        "reviews": len(listed),
        "states": dict(states),
        "messages_in_sink": len(sink.received),
        "sent_reviews_by_delivery_tries": dict(sorted(tries.items())),
        "lost": lost,
        "doubled": doubled,
        "left_open": left,
        "sent_not_delivered_exactly_once": not_once,
        "delivered_but_not_recorded_sent": unrecorded,
        "not_exactly_one_terminal_nudge": not_one_terminal,
        "stuck_in_client": run.stuck,
    }


async def main(
    seconds: float,
    workers: int,
    quiet_s: float,
    seed: int,
    focus: str,
    callers: bool,
    caller_every_s: float,
    target: str | None = None,
) -> int:
    if not os.environ.get(PG_ENV):
        print(f"{PG_ENV} must name a PostgreSQL server", file=sys.stderr)
        return 2
    rng = random.Random(seed)
    sink = Sink()
    smtp_port = free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=smtp_port)
    controller.start()
    imap = ImapServer(lambda: list(sink.received))
    imap.start()
    data = Path(tempfile.mkdtemp(prefix="reviewloop-chaos-"))
    databases = Databases(data)
    stack = await start_stack(
        databases,
        "postgres",
        data,
        {
            "REVIEWLOOP_SMTP_URL": f"smtp://127.0.0.1:{smtp_port}",
            "REVIEWLOOP_IMAP_URL": imap.url,
            "REVIEWLOOP_RECONCILE_SWEEP_S": "1",
        },
        wait_s=180,  # a loaded box starts six processes and migrates six stores slowly
        target=target,
    )
    stats: Counter[str] = Counter()
    kills: Counter[str] = Counter()
    lock = asyncio.Lock()
    client = Client(f"http://{stack.address('gateway')}", stats)
    run = Run(client, seed)
    started = time.monotonic()
    try:
        await run.setup()
        until = time.monotonic() + seconds
        stop = asyncio.Event()
        on_call = asyncio.create_task(operator(run, sink, stop, stats))
        await asyncio.gather(
            killer(stack, until, rng, kills, focus, lock),
            *(
                [caller_killer(stack, run, until, random.Random(rng.random()), kills, lock, caller_every_s)]
                if callers
                else []
            ),
            *(run.worker(n, until) for n in range(workers)),
        )
        for name in [MONOLITH] if monolithic(stack) else ALL:  # everything up for the quiet minute
            if name not in stack.procs or stack.procs[name].poll() is not None:
                start_again(stack, name)
        await stack.wait_serving(ALL, 180)
        await asyncio.sleep(quiet_s)
        stop.set()
        await on_call
        report = await check(run, sink)
        report.update(await check_stores(stack))
    finally:
        await client.http.aclose()
        stack.stop_all()
        controller.stop()
        imap.stop()
        await databases.drop_all()
    report = {
        "target": target or "microservices",
        "seed": seed,
        "load_s": seconds,
        "quiet_s": quiet_s,
        "wall_s": round(time.monotonic() - started, 1),
        "lifecycles": len(run.reviews),
        "kills": dict(kills),
        "kills_total": sum(kills.values()),
        "imap_evidence_searches": imap.searches,
        "client_retries": dict(stats),
        **report,
    }
    print(json.dumps(report, indent=2, sort_keys=True))
    failed = [
        name
        for name in (
            "lost",
            "doubled",
            "left_open",
            "sent_not_delivered_exactly_once",
            "delivered_but_not_recorded_sent",
            "not_exactly_one_terminal_nudge",
            "stuck_in_client",
            "closed_without_one_stored_terminal_nudge",
            "delivered_not_in_receivers_inbox",
        )
        if report[name]
    ]
    print("chaos: " + ("FAILED " + ", ".join(failed) if failed else "every check passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=150.0, help="load with kills (default 150)")
    parser.add_argument("--workers", type=int, default=4, help="concurrent lifecycles (default 4)")
    parser.add_argument("--quiet", type=float, default=60.0, help="quiet time before checking (default 60)")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--focus", choices=ALL, default="", help="this process takes half of the kills")
    parser.add_argument(
        "--no-caller-kills",
        dest="callers",
        action="store_false",
        help="only random kills: do not also kill the caller of an in-flight Ingest",
    )
    parser.add_argument(
        "--caller-kill-every",
        type=float,
        default=7.0,
        help="mean seconds between kills of an in-flight Ingest's caller (default 7)",
    )
    parser.add_argument(
        "--target",
        choices=("microservices", "all"),
        default="microservices",
        help="all: monolithic mode, every part in one process that each kill takes down whole",
    )
    args = parser.parse_args()
    sys.exit(
        asyncio.run(
            main(
                args.seconds,
                args.workers,
                args.quiet,
                args.seed,
                args.focus,
                args.callers,
                args.caller_kill_every,
                None if args.target == "microservices" else args.target,
            )
        )
    )
