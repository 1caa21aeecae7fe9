"""Request headers the gateway's routes share."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header

IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"

IdempotencyKey = Annotated[
    str,
    Header(
        alias="Idempotency-Key",
        # The pattern bounds the length; a maxLength beside it makes schemathesis 4's coverage phase send
        # a body that is not an object as a valid request.
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description=(
            "Makes a retried mutation safe: the same key with the same body answers the first result; "
            "the same key with a different body is 409 idempotency_conflict. Printable ASCII, at most "
            "255 characters."
        ),
    ),
]
"""For a route whose owning service dedupes in its own transaction: declare ``idempotency_key:
IdempotencyKey = ""`` and pass it on (``idempotency_key=idempotency_key``); the OpenAPI document marks the
operation ``x-idempotency: service``. A mutation that does not declare it is still idempotent: the
gateway's middleware (asgi.Edge) replays it (``x-idempotency: gateway``)."""
