"""A verb as data: the :class:`Call` a builder returns, and :class:`verb`, which makes a builder a method.

A builder is written once, in its plane's module, and is three things at once: on the class
(``Verbs.get_review(id)``) it builds the :class:`Call`; on an :class:`~reviewloop.client.AsyncReviewloop` it
is a coroutine method, and on a :class:`~reviewloop.client.Reviewloop` a blocking one, both running that
``Call`` through the client's ``run``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

from pydantic import BaseModel

if TYPE_CHECKING:
    from reviewloop.client.transport import AsyncTransport, SyncTransport

T = TypeVar("T")
P = ParamSpec("P")
M = TypeVar("M", bound=BaseModel)
Json = dict[str, Any]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One verb: the route, its arguments, and how to read its answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    body: Json | None = None
    idempotency_key: str | None = None
    timeout_s: float | None = None

    @property
    def mutation(self) -> bool:
        """Whether the verb writes; a mutation is always sent with an ``Idempotency-Key``."""
        return self.method != "GET"


class verb(Generic[P, T]):  # a decorator, named as one
    """Makes a ``Call`` builder (a ``@staticmethod``) a verb method of both clients.

    Read on a class it is the builder itself; read on a client it runs what the builder returns.
    """

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build

    @overload
    def __get__(self, client: None, owner: type) -> Callable[P, Call[T]]: ...
    @overload
    def __get__(self, client: AsyncTransport, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, client: SyncTransport, owner: type) -> Callable[P, T]: ...
    def __get__(self, client: Any, owner: type) -> Callable[P, Any]:
        build = self.build
        if client is None:
            return build

        @functools.wraps(build)
        def run(*args: P.args, **kwargs: P.kwargs) -> Any:
            return client.run(build(*args, **kwargs))

        return run


def shaped(model: type[M]) -> Callable[[Any], M]:
    """Parse an answer into ``model``, ignoring the fields this client does not know yet."""
    return lambda data: model.model_validate(data, extra="ignore")


def raw(data: Any) -> Json:
    """Take an answer as the JSON object it is."""
    return dict(data)


def quoted(value: str) -> str:
    """``value`` as one path segment."""
    return quote(value, safe="")


def drop_none(values: Mapping[str, Any]) -> Json:
    """The arguments that were given: an omitted one is left to the server's default."""
    return {k: v for k, v in values.items() if v is not None}
