"""How the gateway's routes answer: every route's ``response_model`` is a shape of ``reviewloop.shapes``.

A route returns the dict its ``gateway.translate`` constructor built. Where that is cheap, FastAPI
validates the dict against the route's shape and writes the JSON in one pass; fields the constructor did
not set stay absent rather than ``null`` (``ShapedRoute``).

Answers that grow with the data, a review (bodies, attachments, turns) or a page of rows, are not worth
validating on every request: validation costs more than the whole encoding did (a full review: ~80 us, a
page of 50 reviews several ms). Those routes, the hot ``get_review`` and submit verbs among them, return
``encoded(...)``: the constructor's dict written once by orjson. Their shape still documents them, and
``tests/contract/test_one_declaration.py`` checks what each of those constructors builds against it.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute


class OrjsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def encoded(body: dict[str, Any], status_code: int = 200) -> OrjsonResponse:
    """``body`` as the answer, written once and not validated (see the module docstring)."""
    return OrjsonResponse(body, status_code=status_code)


class ShapedRoute(APIRoute):
    """An APIRoute that answers its shape with the fields the route set (``exclude_unset``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["response_model_exclude_unset"] = True
        super().__init__(*args, **kwargs)


# Set in the ASGI scope by a route whose answer holds a secret: what a replay under the request's
# Idempotency-Key answers instead, since the gateway stores that answer (asgi.Edge).
REPLAY_ANSWER = "reviewloop.replay_answer"


def replay_answer(request: Request, body: dict[str, Any]) -> None:
    """Store ``body``, not the answer given now, as the answer a replay of this request gets."""
    request.scope[REPLAY_ANSWER] = orjson.dumps(body)
