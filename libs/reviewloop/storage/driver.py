"""PostgreSQL statements run on the driver, below SQLAlchemy's execution layer (issue 18).

SQLAlchemy spends ~95 us of CPU executing a prebuilt statement (its execution context, cursor adaptation
and result machinery) around the ~50 us asyncpg itself takes. ``DriverConnection.execute`` runs a
prebuilt statement (a read, a compare-and-set, a unit's queued rows) on the connection's asyncpg
connection itself, in autocommit or in the connection's transaction, as SQLAlchemy would have run it:

- the same SQL: the statement compiled once by the same dialect, with the same parameter order, bind
  and result processors (``UtcDateTime`` among them), on the same prepared-statement cache; an expanding
  (``IN``) parameter gets a plan per length of its list, as SQLAlchemy renders a text per length;
- the same transaction: autocommit, or the connection's own, begun as SQLAlchemy's autobegin begins it;
- the same answer: a ``Result`` of SQLAlchemy rows, with ``rowcount`` from the command tag;
- the same errors: the driver's error mapped as SQLAlchemy maps it (``IntegrityError``...), a dead
  connection invalidated in the pool, and a connection whose statement was cancelled closed at once.

Everything else goes through SQLAlchemy unchanged: SQLite; a statement built for one call (a statement is
planned when seen a second time, so one built per call never is); literal-execute parameters,
``executemany`` and execution options; a transaction that failed; and every statement while someone
listens to SQLAlchemy's cursor events (a test counting statements). ``REVIEWLOOP_TRACE_SQL``'s
instrumentation listens there too: on an engine marked ``traced`` the driver path writes the same span.

It relies on a few of SQLAlchemy 2.0's private names (the compiled statement's positional order and
processors, the asyncpg adapter's statement cache, transaction start and error mapping);
``pyproject.toml`` holds SQLAlchemy below 2.1, and ``tests/reviewloop/test_driver.py`` holds both paths
to the same answers.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

from opentelemetry import trace
from sqlalchemy.engine import Connection, CursorResult, Dialect
from sqlalchemy.engine.result import IteratorResult, SimpleResultMetaData
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.util import greenlet_spawn

_ROWCOUNT = re.compile(r"(?:SELECT|UPDATE|DELETE|INSERT \d+|MERGE) (\d+)")


class DriverResult(IteratorResult[Any]):
    """A driver-path answer: SQLAlchemy rows, and the statement's ``rowcount`` as a cursor reports it."""

    def __init__(
        self, metadata: SimpleResultMetaData, rows: Sequence[Any], status: str | None, returns_rows: bool
    ) -> None:
        super().__init__(metadata, iter(rows))
        match = _ROWCOUNT.match(status or "")
        self.rowcount = int(match.group(1)) if match else -1
        if not returns_rows:  # fetching raises ResourceClosedError, as from a cursor without rows
            self._soft_close(hard=True)


@dataclass
class _Plan:
    """One statement as SQLAlchemy's execution binds it.

    For one set of parameter names and, for an expanding parameter, one length of its list.
    """

    sql: str
    # key, name, default, bind processor, and for an expanding parameter's element its index
    binds: tuple[tuple[str, str, Any, Callable[[Any], Any] | None, int | None], ...]
    result_types: list[Any]  # the statement's result column types (empty: a textual statement)
    keys: list[str]
    # Set by the first run, from the driver's column types (a result processor may depend on them).
    processors: list[Callable[[Any], Any] | None] | None = None
    metadata: SimpleResultMetaData | None = None

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        """The positional arguments, each through its type's bind processor (None too, as SQLAlchemy)."""
        args = []
        for key, name, default, process, index in self.binds:
            value = params[key] if key in params else params.get(name, default)
            if index is not None:
                value = value[index]
            args.append(value if process is None else process(value))
        return args

    def settle(self, dialect: Dialect, attributes: Sequence[Any]) -> bool:
        """Fix the result processors from the driver's columns; False if they do not match the statement's."""
        if self.result_types and len(self.result_types) != len(attributes):
            return False
        processors = [
            type_._cached_result_processor(dialect, attribute.type.oid)
            for type_, attribute in zip(self.result_types, attributes, strict=False)
        ]
        self.processors = processors if any(p is not None for p in processors) else []
        self.metadata = SimpleResultMetaData(self.keys or [attribute.name for attribute in attributes])
        return True


@dataclass
class _Compiled:
    """A statement compiled for one set of parameter names, and its plans by expanding lists' lengths."""

    compiled: Any
    required: frozenset[str]  # the keys without a default
    expanding: tuple[tuple[str, Any], ...]  # its expanding (``IN``) parameters: key, default list
    plans: dict[tuple[int, ...], _Plan | None]

    def plan(self, params: Mapping[str, Any]) -> _Plan | None:
        """The plan for ``params``' list lengths; None when an expanding value is not a list."""
        lists = [params.get(key, default) for key, default in self.expanding]
        if not all(isinstance(values, (list, tuple)) for values in lists):
            return None  # SQLAlchemy's execution says what it makes of it
        lengths = tuple(map(len, lists))
        if lengths not in self.plans:
            try:
                self.plans[lengths] = self._plan(params)
            except Exception:  # SQLAlchemy's execution reports what is wrong with the parameters
                return None
        return self.plans[lengths]

    def _plan(self, params: Mapping[str, Any]) -> _Plan | None:
        compiled = self.compiled
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        sql, positions, processors = compiled.string, compiled.positiontup or (), compiled._bind_processors
        element: dict[str, tuple[str, int]] = {}  # an expanding list's element: (its list's name, index)
        if self.expanding:
            state = compiled.construct_expanded_state(params, escape_names=False)
            sql, positions, processors = state.statement, state.positiontup or (), state.processors
            for name, expanded in state.parameter_expansion.items():
                element.update((each, (name, i)) for i, each in enumerate(expanded))
        binds = []
        for position in positions:
            name, index = element.get(position, (position, None))
            bind = by_name.get(name)
            if bind is None or (index is not None and bind.type._is_tuple_type):
                return None
            binds.append((bind.key, name, bind.value, processors.get(position), index))
        return _Plan(
            sql=sql,
            binds=tuple(binds),
            result_types=[column[3] for column in compiled._result_columns],
            keys=[column[0] for column in compiled._result_columns],
        )


def _compile(statement: ClauseElement, dialect: Dialect, names: list[str]) -> _Compiled | None:
    """``statement`` compiled as SQLAlchemy compiles it for parameters ``names``.

    None when its binding is more than positional: literal-execute parameters, escaped names, computed
    values.
    """
    compiled: Any = statement.compile(dialect=dialect, column_keys=names)
    if compiled.literal_execute_params or compiled.escaped_bind_names or not compiled.positional:
        return None
    required = set()
    for bind, name in compiled.bind_names.items():
        if bind.callable is not None or (bind.required and bind.key != name):
            return None
        if bind.required:
            required.add(name)
    expanding = tuple((bind.key, bind.value) for bind in compiled.post_compile_params if bind.expanding)
    if len(expanding) != len(compiled.post_compile_params):
        return None
    return _Compiled(compiled, frozenset(required), expanding, {})


class _Plans:
    """One engine's plans of the statements it saw more than once, by statement and parameter names.

    Per engine (its dialect): a plan is compiled by the engine's own dialect, and each engine runs a
    statement through SQLAlchemy first, so its compiled cache holds it for when the driver path is off.
    """

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._seen: weakref.WeakKeyDictionary[ClauseElement, dict[tuple[str, ...], _Compiled | None]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, statement: ClauseElement, params: Mapping[str, Any]) -> _Plan | None:
        try:
            by_names = self._seen.get(statement)
        except TypeError:  # not weakly referenceable: never planned
            return None
        names = tuple(params)
        if by_names is None:  # first sighting: SQLAlchemy runs it, a second one plans it
            self._seen[statement] = {}
            return None
        if names not in by_names:
            try:
                by_names[names] = _compile(statement, self.dialect, sorted(names))
            except Exception:  # SQLAlchemy's execution reports why it does not compile
                by_names[names] = None
        compiled = by_names[names]
        if compiled is None or compiled.required - params.keys():
            return None  # a missing value: SQLAlchemy says which
        return compiled.plan(params)

    def drop(self, statement: ClauseElement, params: Mapping[str, Any]) -> None:
        self._seen.get(statement, {})[tuple(params)] = None


_plans: weakref.WeakKeyDictionary[Dialect, _Plans] = weakref.WeakKeyDictionary()


def _plans_of(dialect: Dialect) -> _Plans:
    plans = _plans.get(dialect)
    if plans is None:
        plans = _plans[dialect] = _Plans(dialect)
    return plans


# Dialects of engines whose statements are traced (``traced``): one per engine, shared by its option engines.
_traced: weakref.WeakSet[Dialect] = weakref.WeakSet()
_tracer = trace.get_tracer("reviewloop.storage")


def traced(engine: AsyncEngine) -> None:
    """Mark ``engine`` as traced (``REVIEWLOOP_TRACE_SQL``): the driver path writes its statements' spans.

    OpenTelemetry's instrumentation traces the statements SQLAlchemy runs, through its cursor events.
    """
    _traced.add(engine.sync_engine.dialect)


class DriverConnection(AsyncConnection):
    """An ``AsyncConnection`` that runs a prebuilt statement on the driver (see the module)."""

    __slots__ = ()

    async def execute(
        self,
        statement: Any,
        parameters: Any = None,
        *,
        execution_options: Any = None,
    ) -> CursorResult[Any]:
        """``AsyncConnection.execute``, on the driver when the statement and the connection allow it."""
        sync = self.sync_connection
        if (
            execution_options is None
            and (parameters is None or isinstance(parameters, dict))
            and isinstance(statement, ClauseElement)
            and sync is not None
            and not (sync.closed or sync.invalidated)
            and (not sync.dispatch.before_cursor_execute or self.dialect in _traced)
        ):
            adapted = sync.connection.dbapi_connection
            params = parameters or {}
            plan = _plans_of(self.dialect).get(statement, params)
            args = _arguments(plan, params) if plan is not None else None
            if plan is not None and args is not None and await self._joined(sync, adapted):
                answer = await self._run(sync, adapted, statement, plan, params, args)
                if answer is not None:
                    return cast(CursorResult[Any], answer)
        return await super().execute(statement, parameters, execution_options=execution_options)

    async def _joined(self, sync: Connection, adapted: Any) -> bool:
        """Whether a statement may run on the driver where SQLAlchemy's execution would run it.

        In autocommit, or in the connection's transaction, begun here as SQLAlchemy's autobegin would.
        """
        if adapted.autocommit:
            return True
        transaction = sync.get_transaction()
        if transaction is None:
            await greenlet_spawn(sync.begin)
            return True
        return transaction.is_active  # an inactive one: SQLAlchemy says it must be rolled back

    async def _run(
        self,
        sync: Connection,
        adapted: Any,
        statement: ClauseElement,
        plan: _Plan,
        params: Mapping[str, Any],
        args: list[Any],
    ) -> DriverResult | None:
        with self._span(plan.sql):
            async with adapted._execute_mutex:
                try:
                    if not adapted.autocommit and not adapted._started:
                        await adapted._start_transaction()  # its BEGIN, as SQLAlchemy's cursor sends it
                    dialect: Any = self.dialect
                    prepared, attributes = await adapted._prepare(
                        plan.sql, dialect._invalidate_schema_cache_asof
                    )
                    if plan.metadata is None and not plan.settle(self.dialect, attributes):
                        _plans_of(self.dialect).drop(statement, params)
                        return None
                    records = await prepared.fetch(*args)
                except Exception as error:
                    await greenlet_spawn(_raise, sync, adapted, error, plan.sql, args)
                    raise  # _raise always raises
                except BaseException:
                    # Cancelled at an await (the caller went away): the server may have run the BEGIN or
                    # the statement without the adapter knowing (asyncpg then keeps the failed BEGIN as
                    # its open transaction, and the next unit on this connection would run as a SAVEPOINT
                    # inside it, answering OK and never committing). Nobody knows the connection's state:
                    # close it at once, as SQLAlchemy's own execution does on an exit exception.
                    sync.invalidate()
                    raise
            if plan.processors:
                processors = plan.processors
                records = [
                    tuple(v if p is None else p(v) for p, v in zip(processors, record, strict=True))
                    for record in records
                ]
            assert plan.metadata is not None
            return DriverResult(plan.metadata, records, prepared.get_statusmsg(), bool(attributes))

    def _span(self, sql: str) -> AbstractContextManager[Any]:
        """The statement's span on a traced engine, as OpenTelemetry's instrumentation writes it."""
        if self.dialect not in _traced:
            return nullcontext()
        return _tracer.start_as_current_span(
            sql.split(None, 1)[0],
            kind=trace.SpanKind.CLIENT,
            attributes={
                "db.system": "postgresql",
                "db.name": self.engine.url.database or "",
                "db.statement": sql,
            },
        )


def _arguments(plan: _Plan, params: Mapping[str, Any]) -> list[Any] | None:
    """``plan``'s arguments for ``params``; None when a value does not bind (SQLAlchemy then says why)."""
    try:
        return plan.arguments(params)
    except Exception:
        return None


def _raise(sync: Connection, adapted: Any, error: Exception, sql: str, args: list[Any]) -> None:
    """Raise ``error`` as SQLAlchemy would have: mapped to its DBAPI error, then wrapped.

    A dead connection is invalidated in the pool; this runs in SQLAlchemy's greenlet, where the pool can
    close it.
    """
    try:
        adapted._handle_exception(error)
    except Exception as dbapi_error:
        sync._handle_dbapi_exception(dbapi_error, sql, tuple(args), None, None)
        raise
    raise error


class DriverEngine(AsyncEngine):
    """An ``AsyncEngine`` whose connections are ``DriverConnection``s, its option engines included."""

    __slots__ = ()
    _connection_cls = DriverConnection

    def execution_options(self, **opt: Any) -> DriverEngine:
        """``AsyncEngine.execution_options``, whose engine keeps the driver path."""
        return DriverEngine(self.sync_engine.execution_options(**opt))
