"""The MCP server at ``/mcp``: every agent-facing route is a tool named by its ``operation_id``.

Honest by construction: a tool is built from its FastAPI route (input schema from the route's path and
query parameters, its ``Idempotency-Key`` header and its JSON body model) and a call executes that very
route in-process with the caller's own ``Authorization`` header. So a tool authenticates, checks actors
and tenancy, validates, and fails exactly as its route does: an error answer is a tool error whose
structured content is the route's problem+json. A new route with an ``operation_id`` is a new tool, with
no edit here. Console routes (``/v1/admin``) are human authority and are not tools.

A key lists only the tools of its plane: the actor kinds its route's ``require`` dependency admits,
narrowed where the owning service admits fewer (``SERVICE_AUTHORITY``). A tool's input schema keeps its
shared shapes once, in its own ``$defs``; its output schema is the answer's top level (each field's type,
enum and whether it is required), since the full shapes are ``/openapi.yaml``'s and an agent reads the
answer itself. So an agent key's ``tools/list`` is about a tenth of the whole surface's.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import mcp_types as types
import orjson
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from reviewloop.contract import CONTRACT_VERSION
from reviewloop.errors import Code, DomainError, status_of
from reviewloop.tenancy import ActorKind
from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import Receive, Scope, Send

from gateway import problems
from gateway.auth import Caller, authenticate
from gateway.routes import ROUTERS

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
CONSOLE_PREFIX = "/v1/admin"
IDEMPOTENCY_ARGUMENT = "idempotency_key"
CLIENT_ID_ARGUMENT = "client_id"  # the skill catalog's name for the idempotency key
ID_ARGUMENT = "id"  # the catalog's name for a tool's one path id (review_id, category_id, ...)
BODY_ARGUMENT = "body"
# The skill catalog's tool names for the same operations (the spec's names stay tools too).
CATALOG_ALIASES = {
    "ack_review_event": "ack_review_events",
    "reviewer_decide": "decide_review",
    "propose_category": "create_category",
    "reply_email": "reply_to_email",
    "retire_rule": "retire_project_rule",
    "update_category": "update_project_category",
}
# The catalog's reply_email picks its parent by message_id or, without one, by thread_id: a reply that
# names only its thread goes to the thread's route (the reply to its newest message).
BY_THREAD = {"reply_to_email": "reply_to_thread"}
# Mutations the catalog marks idempotent without an Idempotency-Key: an ack never moves a cursor back.
IDEMPOTENT_WITHOUT_KEY = frozenset({"ack_review_events"})
FORWARDED_HEADERS = ("authorization", "x-request-id", "traceparent")
INSTRUCTIONS = (
    "reviewloop: the review loop for agent email. Submit with send_email / reply_to_email / forward_email "
    "(always with an intent), drain list_review_events or wait_for_review_event, act on each nudge, "
    "ack_review_events, and stop on the terminal event (sent, send_failed, cancelled, front_run_next). "
    "A failed call is a tool error carrying RFC 9457 problem+json: branch on its `code`."
)
# Routes that admit every project key while the owning service admits fewer (docs/budget.md: who
# may call them; rules/app: categories, merge, graduation). A tool is listed to the kinds in both.
_REVIEWER_PLANE = frozenset({ActorKind.REVIEW_AGENT, ActorKind.SERVICE})
_ADMIN = frozenset({ActorKind.ADMIN})
SERVICE_AUTHORITY: dict[str, frozenset[ActorKind]] = {
    "record_review_run": _REVIEWER_PLANE | _ADMIN,
    "admit_review_round": _REVIEWER_PLANE,
    "settle_review_attempt": _REVIEWER_PLANE,
    "append_journal_events": _REVIEWER_PLANE,
    "bind_review_session": _REVIEWER_PLANE,
    "complete_review_session": _REVIEWER_PLANE,
    "heartbeat_review_session": _REVIEWER_PLANE,
    "extend_review_budget": _ADMIN,
    "register_runner": _ADMIN,
    "set_review_config": _ADMIN,
    "set_gate_config": _ADMIN,
    "update_project_category": frozenset({ActorKind.ADMIN, ActorKind.AGENT}),
    "merge_categories": frozenset({ActorKind.ADMIN, ActorKind.AGENT}),
    "list_graduation_proposals_of_category": _ADMIN,
    "get_dial_effect": frozenset({ActorKind.HUMAN, ActorKind.ADMIN}),
}
# The dispatch-budget surface (specs 001-003: runs, rounds, sessions, journals, the gate) serves review
# harnesses: its tools are listed to the reviewer plane and admins. A composer's or a human's key still
# reads it over REST (docs/budget.md); its tools are not in their lists.
BUDGET_ROUTES = "gateway.routes.budget"
HARNESS_PLANES = _REVIEWER_PLANE | _ADMIN
_REF = re.compile(r"^#/components/schemas/(.+)$")
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_CALLER = "reviewloop.mcp.caller"  # the authenticated caller, in the request scope's state


@dataclass(frozen=True)
class Operation:
    """One route as a tool: where its arguments go on the HTTP request."""

    name: str
    method: str
    path: str
    description: str
    input_schema: dict[str, Any]
    path_params: frozenset[str]
    query_params: frozenset[str]
    takes_idempotency_key: bool
    body_fields: frozenset[str] | None  # flattened body properties; None when the body is one argument
    has_body: bool
    read_only: bool
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] = field(default_factory=dict)
    # The actor kinds whose keys see this tool; None: every caller (a route without an actor check).
    actor_kinds: frozenset[ActorKind] | None = None

    @property
    def idempotent(self) -> bool:
        """A read, a mutation that honours an idempotency key, or one idempotent by its nature."""
        return self.read_only or self.takes_idempotency_key or self.name in IDEMPOTENT_WITHOUT_KEY

    def visible_to(self, caller: Caller) -> bool:
        """Whether ``caller``'s plane uses this tool (the bootstrap token is no project key)."""
        if self.actor_kinds is None:
            return True
        return caller.principal is not None and caller.principal.actor_kind in self.actor_kinds

    def tool(self, alias: str | None = None) -> types.Tool:
        """The tool, or the same tool under its catalog ``alias``, which names the original's arguments
        and leaves their schemas to it (a call is checked by the same route)."""
        return types.Tool(
            name=alias or self.name,
            description=self.description
            if alias is None
            else f"The catalog's name for {self.name}: its arguments and answer. {self.description}",
            input_schema=self.input_schema if alias is None else _names_only(self.input_schema),
            output_schema=self.output_schema,
            annotations=types.ToolAnnotations(
                read_only_hint=self.read_only,
                destructive_hint=False,
                idempotent_hint=self.idempotent,
                open_world_hint=False,
            ),
        )


def _resolve(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    match = _REF.match(schema.get("$ref", ""))
    return dict(components[match.group(1)]) if match else schema


# A free-form JSON value: the OpenAPI document spells out what a store keeps of one (gateway.constraints).
_FREE_FORM = frozenset({"JsonValue"})


def _with_defs(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """``schema`` self-contained: component refs point into its own ``$defs``."""
    defs: dict[str, Any] = {}

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: rewrite(v) for k, v in node.items()}
            match = _REF.match(node.get("$ref", "")) if isinstance(node.get("$ref"), str) else None
            if match and match.group(1) in _FREE_FORM:
                return {}  # any JSON: like the other bounds, its limits are the route's 422
            if match:
                name = match.group(1)
                out["$ref"] = f"#/$defs/{name}"
                if name not in defs:
                    defs[name] = {}
                    defs[name] = rewrite(components[name])
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    result: dict[str, Any] = rewrite(copy.deepcopy(schema))
    if defs:
        result["$defs"] = defs
    return result


# Bounds a route enforces and names in its 422 (``/subject: at most 998 characters``): not repeated in
# every tool's schema, where an agent never comes near most of them.
_BOUNDS = frozenset(
    {
        "maxLength",
        "minLength",
        "maxItems",
        "minItems",
        "maximum",
        "minimum",
        "maxProperties",
        "pattern",
        "propertyNames",
        "uniqueItems",
    }
)


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, null]`` as X with ``"null"`` among its types, when X is one plain type: the same
    values, in a third of the bytes."""
    options = node.get("anyOf")
    if not (isinstance(options, list) and len(options) == 2 and {"type": "null"} in options):
        return node
    (other,) = [option for option in options if option != {"type": "null"}]
    if not isinstance(other.get("type"), str) or "const" in other:
        return node
    merged = {**{k: v for k, v in node.items() if k != "anyOf"}, **other, "type": [other["type"], "null"]}
    if "enum" in other:
        merged["enum"] = [*other["enum"], None]
    return merged


def _compact(node: Any, names: bool = False) -> Any:
    """``node`` without pydantic's generated ``title`` keywords (a field named ``title`` stays) and the
    ``_BOUNDS``, its nullable fields as ``_nullable``."""
    if isinstance(node, list):
        return [_compact(value) for value in node]
    if not isinstance(node, dict):
        return node
    if names:
        return {key: _compact(value) for key, value in node.items()}
    return _nullable(
        {
            key: _compact(value, names=key in ("properties", "$defs"))
            for key, value in node.items()
            if not (key == "title" and isinstance(value, str)) and key not in _BOUNDS
        }
    )


def _names_only(schema: dict[str, Any]) -> dict[str, Any]:
    """An object schema's field names, and which are required, without the fields' own schemas."""
    trimmed: dict[str, Any] = {
        "type": "object",
        "properties": {name: {} for name in schema.get("properties", {})},
    }
    if schema.get("required"):
        trimmed["required"] = schema["required"]
    return trimmed


def _trimmed_output(schema: dict[str, Any]) -> dict[str, Any]:
    """An answer's output schema: the names of its fields, and which are always there. (Their shapes are
    ``/openapi.yaml``'s; an agent reads them in the answer itself.)"""
    return _names_only(schema)


def _dependency_kinds(dependant: Dependant) -> frozenset[ActorKind] | None:
    kinds: frozenset[ActorKind] | None = getattr(dependant.call, "actor_kinds", None)
    for sub in dependant.dependencies:
        if kinds is not None:
            break
        kinds = _dependency_kinds(sub)
    return kinds


def planes(routes: Iterable[BaseRoute]) -> dict[str, frozenset[ActorKind]]:
    """The actor kinds each route admits (its ``auth.require`` dependency), narrowed by
    ``SERVICE_AUTHORITY`` and, on the dispatch-budget surface, to ``HARNESS_PLANES``; keyed by
    operation id. A route without an actor check is absent."""
    found: dict[str, frozenset[ActorKind]] = {}
    for route in routes:
        if isinstance(route, APIRoute) and (kinds := _dependency_kinds(route.dependant)) is not None:
            name = route.operation_id or route.name
            kinds &= SERVICE_AUTHORITY.get(name, kinds)
            if route.endpoint.__module__.startswith(BUDGET_ROUTES):
                kinds &= HARNESS_PLANES
            found[name] = kinds
    return found


def operations(app: FastAPI) -> dict[str, Operation]:
    """Every agent-facing operation of ``app``'s OpenAPI document, keyed by tool name (its operationId)."""
    document = app.openapi()
    components: dict[str, Any] = document.get("components", {}).get("schemas", {})
    kinds = planes(route for router in ROUTERS for route in router.routes)
    found: dict[str, Operation] = {}
    for path, item in document.get("paths", {}).items():
        if not path.startswith("/v1/") or path.startswith(CONSOLE_PREFIX):
            continue
        for method, spec in item.items():
            if (
                method.upper() in _METHODS
                and (name := spec.get("operationId"))
                and spec.get("x-mcp-tool", True)
            ):
                found[name] = _operation(path, method.upper(), spec, components, kinds.get(name))
    return found


@dataclass
class _Arguments:
    """A tool's input schema as it is assembled from its operation's parameters and body."""

    properties: dict[str, Any] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    path_params: set[str] = field(default_factory=set)
    query_params: set[str] = field(default_factory=set)
    takes_key: bool = False
    has_body: bool = False
    body_fields: frozenset[str] | None = None

    def parameters(self, spec: dict[str, Any]) -> None:
        """The path and query parameters, each an argument, and the Idempotency-Key header."""
        for param in spec.get("parameters", []):
            where, name = param["in"], param["name"]
            if where == "header" and name.lower() == "idempotency-key":
                self.takes_key = True
                self.properties[IDEMPOTENCY_ARGUMENT] = {
                    **param.get("schema", {"type": "string"}),
                    "description": "a retry with the same key never repeats the mutation",
                }
                self.properties[CLIENT_ID_ARGUMENT] = {"type": "string", "description": "= idempotency_key"}
            if where not in ("path", "query"):
                continue
            (self.path_params if where == "path" else self.query_params).add(name)
            schema = dict(param.get("schema", {}))
            if param.get("description"):
                schema["description"] = param["description"]
            self.properties[name] = schema
            if param.get("required"):
                self.required.append(name)

    def body(self, spec: dict[str, Any], components: dict[str, Any]) -> None:
        """An object body's fields, each an argument (unless one shares a parameter's name: then the
        whole body is one ``body`` argument)."""
        content = spec.get("requestBody", {}).get("content", {}).get("application/json")
        if content is None:
            return
        self.has_body = True
        body = _resolve(content.get("schema", {}), components)
        body_props = body.get("properties")
        if body.get("type") == "object" and body_props and not set(body_props) & set(self.properties):
            self.properties.update(body_props)
            self.required += body.get("required", [])
            self.body_fields = frozenset(body_props)
        else:
            self.properties[BODY_ARGUMENT] = content.get("schema", {})
            if spec["requestBody"].get("required"):
                self.required.append(BODY_ARGUMENT)


def _operation(
    path: str,
    method: str,
    spec: dict[str, Any],
    components: dict[str, Any],
    actor_kinds: frozenset[ActorKind] | None,
) -> Operation:
    arguments = _Arguments()
    arguments.parameters(spec)
    arguments.body(spec, components)
    properties, required, path_params = arguments.properties, arguments.required, arguments.path_params
    if len(path_params) == 1:  # the catalog names a tool's one id ``id``
        (only,) = path_params
        properties[ID_ARGUMENT] = {**properties[only], "description": f"= {only}"}
        required.remove(only)
    input_schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        input_schema["required"] = sorted(set(required))
    # (No top-level anyOf for "one of the two": some clients refuse it. A call naming neither is a 400.)
    output_schema = _output_schema(spec, components)
    summary = spec.get("description") or spec.get("summary") or ""
    return Operation(
        name=spec["operationId"],
        method=method,
        path=path,
        description=f"{method} {path}: {summary}".strip().rstrip(":"),
        input_schema=_compact(_with_defs(input_schema, components)),
        path_params=frozenset(path_params),
        query_params=frozenset(arguments.query_params),
        takes_idempotency_key=arguments.takes_key,
        body_fields=arguments.body_fields,
        has_body=arguments.has_body,
        read_only=method == "GET",
        output_schema=output_schema,
        actor_kinds=actor_kinds,
    )


def _output_schema(spec: dict[str, Any], components: dict[str, Any]) -> dict[str, Any] | None:
    """The route's success answer's top level, when it is an object (MCP's ``outputSchema`` describes
    ``structuredContent``, always an object)."""
    for status in ("200", "201", "202"):
        content = spec.get("responses", {}).get(status, {}).get("content", {}).get("application/json")
        if content is None:
            continue
        schema = _resolve(content.get("schema", {}), components)
        return _trimmed_output(schema) if schema.get("type") == "object" else None
    return None


def _error_result(problem: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=orjson.dumps(problem).decode())],
        structured_content=problem,
        is_error=True,
    )


def _problem(error: DomainError) -> dict[str, Any]:
    return problems.problem_body(error, status_of(error))


class McpGateway:
    """The MCP server over the gateway's own routes, mounted at ``/mcp`` (streamable HTTP, stateless,
    JSON responses: any replica answers any call)."""

    def __init__(self, app: FastAPI, allowed_hosts: tuple[str, ...]) -> None:
        self.app = app
        self._operations: dict[str, Operation] | None = None
        self._client: httpx.AsyncClient | None = None
        self.server: Server[Any] = Server(
            "reviewloop",
            version=CONTRACT_VERSION,
            title="reviewloop",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        # Bearer keys already stop a rebound page from acting; checking Host and Origin is the second lock.
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection="*" not in allowed_hosts,
            allowed_hosts=list(allowed_hosts),
            allowed_origins=[f"{scheme}://{host}" for host in allowed_hosts for scheme in ("http", "https")],
        )
        self.manager = StreamableHTTPSessionManager(
            self.server, stateless=True, json_response=True, security_settings=security
        )

    @property
    def operations(self) -> dict[str, Operation]:
        # Built on first use, once every router is included.
        if self._operations is None:
            self._operations = operations(self.app)
        return self._operations

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Run inside the gateway's lifespan."""
        transport = httpx.ASGITransport(app=self.app)
        async with (
            httpx.AsyncClient(
                transport=transport, base_url="http://gateway.internal", timeout=None
            ) as client,
            self.manager.run(),
        ):
            self._client = client
            try:
                yield
            finally:
                self._client = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ``/mcp`` endpoint: the same bearer keys as the REST surface, checked before MCP sees the
        request (and again by every route a tool calls, so a revoked key stops at once)."""
        try:
            caller = await authenticate(Request(scope))
        except DomainError as error:
            await problems.problem_response(error, Request(scope))(scope, receive, send)
            return
        scope.setdefault("state", {})[_CALLER] = caller
        await self.manager.handle_request(scope, receive, send)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        request = ctx.request if isinstance(ctx.request, Request) else None
        caller = request.scope.get("state", {}).get(_CALLER) if request is not None else None
        if caller is None:  # never reached through __call__, which authenticates first
            return types.ListToolsResult(tools=[])
        tools = [op.tool() for op in self.operations.values() if op.visible_to(caller)]
        tools += [
            self.operations[name].tool(alias)
            for alias, name in CATALOG_ALIASES.items()
            if self.operations[name].visible_to(caller)
        ]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        operation = self.operations.get(CATALOG_ALIASES.get(params.name, params.name))
        if operation is None:
            known = ", ".join(sorted(self.operations))
            return _error_result(
                _problem(DomainError(Code.NOT_FOUND, f"No tool {params.name!r}; the tools are: {known}."))
            )
        arguments = dict(params.arguments or {})
        if (
            operation.name in BY_THREAD
            and arguments.get("thread_id")
            and not (arguments.get("message_id") or arguments.get(ID_ARGUMENT))
        ):
            operation = self.operations[BY_THREAD[operation.name]]
        request = ctx.request if isinstance(ctx.request, Request) else None
        headers = {
            name: value
            for name in FORWARDED_HEADERS
            if request is not None and (value := request.headers.get(name)) is not None
        }
        try:
            response = await self._execute(operation, arguments, headers)
        except DomainError as error:
            return _error_result(_problem(error))
        except Exception:  # never a traceback to the caller, over MCP either
            log.exception("tool %s failed", operation.name)
            return _error_result(
                _problem(DomainError(Code.INTERNAL, "The server failed to handle the request."))
            )
        try:
            payload = response.json() if response.content else {}
        except ValueError:
            payload = {"detail": response.text}
        if response.status_code >= 400:
            return _error_result(payload)
        structured = payload if isinstance(payload, dict) else {"result": payload}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=orjson.dumps(payload).decode())],
            structured_content=structured,
            is_error=False,
        )

    async def _execute(
        self, operation: Operation, arguments: dict[str, Any], headers: dict[str, str]
    ) -> httpx.Response:
        assert self._client is not None, "the MCP server runs inside the gateway's lifespan"
        path = operation.path
        for name in operation.path_params:
            value = arguments.pop(name, None)
            if value is None and len(operation.path_params) == 1:
                value = arguments.pop(ID_ARGUMENT, None)
            if value is None or value == "":
                raise DomainError(Code.BAD_REQUEST, f"/{name}: the argument {name!r} is required.")
            path = path.replace("{" + name + "}", quote(str(value), safe=""))
        query = {
            name: value
            for name in list(arguments)
            if name in operation.query_params and (value := arguments.pop(name)) is not None
        }
        key = arguments.pop(IDEMPOTENCY_ARGUMENT, None) or arguments.pop(CLIENT_ID_ARGUMENT, None)
        arguments.pop(CLIENT_ID_ARGUMENT, None)
        if operation.takes_idempotency_key and key:
            headers = {**headers, "Idempotency-Key": str(key)}
        body: Any = None
        if operation.has_body:
            # Unknown arguments go to the route, whose body model names them in a 422.
            body = arguments if operation.body_fields is not None else arguments.get(BODY_ARGUMENT, {})
        elif arguments:
            unknown = ", ".join(sorted(arguments))
            raise DomainError(
                Code.BAD_REQUEST, f"The tool {operation.name} takes no argument named {unknown}."
            )
        return await self._client.request(
            operation.method,
            path,
            params=query,
            content=orjson.dumps(body) if operation.has_body else None,
            headers={**headers, **({"content-type": "application/json"} if operation.has_body else {})},
        )
