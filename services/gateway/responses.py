"""How the gateway's routes answer: every route's ``response_model`` is a shape of ``reviewloop.shapes``.

A route returns the dict its ``gateway.translate`` constructor built; FastAPI validates it against the
route's shape and writes the JSON in one pass. Fields the constructor did not set stay absent rather than
``null`` (``ShapedRoute``). The hot routes (``get_review``, the three submit verbs) skip that validation and
answer ``OrjsonResponse`` directly: their shape still documents them, and the contract tests check that
what they answer conforms to it.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute


class OrjsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class ShapedRoute(APIRoute):
    """An APIRoute that answers its shape with the fields the route set (``exclude_unset``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["response_model_exclude_unset"] = True
        super().__init__(*args, **kwargs)
