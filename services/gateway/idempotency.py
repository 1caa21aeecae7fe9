"""A gateway-owned mutation runs once per ``Idempotency-Key`` (``Edge.mutation``): the key is claimed
in the gateway's store before the route runs, the claim is renewed while it runs, and a 2xx answer is
remembered for its replay (any other is forgotten: a failed mutation changed nothing, so a retry under
the same key runs it again)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from dataclasses import dataclass
from datetime import timedelta

from reviewloop.errors import Code, DomainError
from reviewloop.storage import Database
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import store
from gateway.responses import REPLAY_ANSWER


async def whole_body(receive: Receive) -> bytes:
    """The request's body, read to its end (the body limit upstream still applies)."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def fingerprint(scope: Scope, body: bytes) -> str:
    """What makes two requests under one key the same request: method, path, query and body."""
    return hashlib.sha256(
        b"%s %s?%s\n%s"
        % (scope["method"].encode(), scope["path"].encode(), scope.get("query_string", b""), body)
    ).hexdigest()


@dataclass(frozen=True)
class Once:
    """One key of one caller's operation (``owner``): the request ``fingerprint`` runs under it once."""

    db: Database
    owner: str
    key: str
    fingerprint: str
    lease: timedelta

    async def claim(self) -> Response | DomainError | None:
        """None when this request now holds the key; else the replay of its remembered answer, or the
        refusal (another request under the key, or this one still running)."""
        async with self.db.transaction() as uow:
            if await store.claim(uow.conn, self.owner, self.key, self.fingerprint, self.lease):
                return None
            prior = await store.remembered(uow.conn, self.owner, self.key)
        if prior is None:  # forgotten in between: a retry runs it
            return DomainError(Code.CONFLICT, "A request with this Idempotency-Key just ended; retry it.")
        if prior.request_sha256 != self.fingerprint:
            return DomainError(
                Code.IDEMPOTENCY_CONFLICT,
                "This Idempotency-Key was already used with a different request; send this one with a new key.",
            )
        if prior.status == store.PENDING:
            return DomainError(
                Code.CONFLICT,
                "A request with this Idempotency-Key is still running; retry it shortly with the same key.",
            )
        return Response(
            prior.response,
            status_code=prior.status,
            media_type="application/json",
            headers={"Idempotent-Replayed": "true"},
        )

    async def run(self, app: ASGIApp, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """Run the mutation holding the key; its answer is held until it is remembered, so a client that
        retries the moment it reads a 2xx finds the replay, not "still running"."""
        status, chunks, held, replayed = 500, [], [], False

        async def replay_body() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            held.append(message)

        renewing = asyncio.create_task(self._renew(), name="idempotency-lease")
        try:
            await app(scope, replay_body, capture)
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            async with self.db.transaction() as uow:
                if 200 <= status < 300:
                    answer = scope.get(REPLAY_ANSWER, b"".join(chunks))
                    await store.remember(uow.conn, self.owner, self.key, status, answer)
                else:
                    await store.forget(uow.conn, self.owner, self.key)
        for message in held:
            await send(message)

    async def _renew(self) -> None:
        """A live request keeps its claim however long it runs."""
        while True:
            await asyncio.sleep(max(self.lease.total_seconds() / 3, 0.01))
            with contextlib.suppress(Exception):  # the store is briefly unreachable: next beat
                async with self.db.transaction() as uow:
                    await store.renew(uow.conn, self.owner, self.key)
