"""The MCP server at ``/mcp``: every agent-facing route is a tool named by its ``operation_id``.

Honest by construction: a tool is built from its FastAPI route (input schema from the route's path and
query parameters, its ``Idempotency-Key`` header and its JSON body model) and a call executes that very
route in-process with the caller's own ``Authorization`` header. So a tool authenticates, checks actors
and tenancy, validates, and fails exactly as its route does: an error answer is a tool error whose
structured content is the route's problem+json. A new route with an ``operation_id`` is a new tool, with
no edit here. Console routes (``/v1/admin``) are human authority and are not tools.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import mcp_types as types
import orjson
from fastapi import FastAPI
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from reviewloop.contract import CONTRACT_VERSION
from reviewloop.errors import Code, DomainError, status_of
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from gateway import problems
from gateway.auth import authenticate

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
_REF = re.compile(r"^#/components/schemas/(.+)$")
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})


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

    @property
    def idempotent(self) -> bool:
        """A read, a mutation that honours an idempotency key, or one idempotent by its nature."""
        return self.read_only or self.takes_idempotency_key or self.name in IDEMPOTENT_WITHOUT_KEY

    def tool(self, name: str | None = None) -> types.Tool:
        return types.Tool(
            name=name or self.name,
            description=self.description if name is None else f"{self.description} (alias of {self.name})",
            input_schema=self.input_schema,
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


def _with_defs(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """``schema`` self-contained: component refs point into its own ``$defs``."""
    defs: dict[str, Any] = {}

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: rewrite(v) for k, v in node.items()}
            match = _REF.match(node.get("$ref", "")) if isinstance(node.get("$ref"), str) else None
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


def operations(app: FastAPI) -> dict[str, Operation]:
    """Every agent-facing operation of ``app``'s OpenAPI document, keyed by tool name (its operationId)."""
    document = app.openapi()
    components: dict[str, Any] = document.get("components", {}).get("schemas", {})
    found: dict[str, Operation] = {}
    for path, item in document.get("paths", {}).items():
        if not path.startswith("/v1/") or path.startswith(CONSOLE_PREFIX):
            continue
        for method, spec in item.items():
            if method.upper() in _METHODS and spec.get("operationId") and spec.get("x-mcp-tool", True):
                found[spec["operationId"]] = _operation(path, method.upper(), spec, components)
    return found


def _operation(path: str, method: str, spec: dict[str, Any], components: dict[str, Any]) -> Operation:
    properties: dict[str, Any] = {}
    required: list[str] = []
    path_params: set[str] = set()
    query_params: set[str] = set()
    takes_key = False
    for param in spec.get("parameters", []):
        where, name = param["in"], param["name"]
        if where == "header":
            if name.lower() == "idempotency-key":
                takes_key = True
                properties[IDEMPOTENCY_ARGUMENT] = {
                    **param.get("schema", {"type": "string"}),
                    "description": "Idempotency-Key: a retry with the same key never repeats the mutation.",
                }
                properties[CLIENT_ID_ARGUMENT] = {
                    **param.get("schema", {"type": "string"}),
                    "description": "The catalog's name for idempotency_key (give one of the two).",
                }
            continue
        if where not in ("path", "query"):
            continue
        (path_params if where == "path" else query_params).add(name)
        schema = dict(param.get("schema", {}))
        if param.get("description"):
            schema["description"] = param["description"]
        properties[name] = schema
        if param.get("required"):
            required.append(name)
    body_fields: frozenset[str] | None = None
    has_body = False
    content = spec.get("requestBody", {}).get("content", {}).get("application/json")
    if content is not None:
        has_body = True
        body = _resolve(content.get("schema", {}), components)
        body_props = body.get("properties")
        if body.get("type") == "object" and body_props and not set(body_props) & set(properties):
            properties.update(body_props)
            required += body.get("required", [])
            body_fields = frozenset(body_props)
        else:
            properties[BODY_ARGUMENT] = content.get("schema", {})
            if spec["requestBody"].get("required"):
                required.append(BODY_ARGUMENT)
    if len(path_params) == 1:  # the catalog names a tool's one id ``id``
        (only,) = path_params
        properties[ID_ARGUMENT] = {**properties[only], "description": f"the catalog's name for {only}"}
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
        input_schema=_with_defs(input_schema, components),
        path_params=frozenset(path_params),
        query_params=frozenset(query_params),
        takes_idempotency_key=takes_key,
        body_fields=body_fields,
        has_body=has_body,
        read_only=method == "GET",
        output_schema=output_schema,
    )


def _output_schema(spec: dict[str, Any], components: dict[str, Any]) -> dict[str, Any] | None:
    """The route's success answer as a self-contained object schema, when it is one (MCP's
    ``outputSchema`` describes ``structuredContent``, always an object)."""
    for status in ("200", "201", "202"):
        content = spec.get("responses", {}).get(status, {}).get("content", {}).get("application/json")
        if content is None:
            continue
        schema = _resolve(content.get("schema", {}), components)
        return _with_defs(schema, components) if schema.get("type") == "object" else None
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
            await authenticate(Request(scope))
        except DomainError as error:
            await problems.problem_response(error, Request(scope))(scope, receive, send)
            return
        await self.manager.handle_request(scope, receive, send)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [op.tool() for op in self.operations.values()]
        tools += [self.operations[name].tool(alias) for alias, name in CATALOG_ALIASES.items()]
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
