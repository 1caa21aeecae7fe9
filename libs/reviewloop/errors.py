"""The error model: one closed set of codes, one exception, one mapping to and from gRPC status.

A domain error carries the spec's closed problem ``code``, a ``detail`` that says the whole fix,
and the recovery facts of the 409 taxonomy. Services raise it; the gRPC interceptor packs it into
``google.rpc.Status`` (``ErrorInfo.reason`` = code, plus ``RecoveryFacts`` and ``BadRequest``);
the gateway unpacks it into RFC 9457 problem+json.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from reviewloop.common.v1 import common_pb2

ERROR_DOMAIN = "reviewloop.dev"
# Bounds that keep a packed status under gRPC's 8 KiB metadata limit.
MAX_DETAIL_CHARS = 2000
MAX_VIOLATIONS = 25
MAX_FIELD_CHARS = 120


class Code(StrEnum):
    """The closed problem ``code`` enum (spec 000 and its SDK). Additive only; clients coerce unknowns
    to ``internal``."""

    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN_SCOPE = "forbidden_scope"
    FORBIDDEN_ACTOR = "forbidden_actor"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    SUPPORT_RECORD_DELETED = "support_record_deleted"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    BREADTH_REQUIRED = "breadth_required"
    QUOTA_EXCEEDED = "quota_exceeded"
    RATE_LIMITED = "rate_limited"
    DOMAIN_NOT_ALLOWED = "domain_not_allowed"
    RECIPIENT_BLOCKED = "recipient_blocked"
    RECIPIENT_SUPPRESSED = "recipient_suppressed"
    NOT_CONFIGURED = "not_configured"
    DOMAIN_UNAVAILABLE = "domain_unavailable"
    INTERNAL = "internal"
    REPLY_CONTEXT_REQUIRED = "reply_context_required"
    REPLY_CONTEXT_CHANGED = "reply_context_changed"
    REPLY_WORKFLOW_REQUIRED = "reply_workflow_required"
    REPLY_ALREADY_PENDING = "reply_already_pending"
    INTENT_REQUIRED = "intent_required"
    WRONG_STATE = "wrong_state"
    TERMINAL = "terminal"
    STALE = "stale"
    BORN_STALE = "born_stale"
    SEND_NEEDS_RECONCILIATION = "send_needs_reconciliation"
    GRADUATION_LOCKED = "graduation_locked"
    MATURITY_GATE_UNMET = "maturity_gate_unmet"
    SCOPE_TAKEN = "scope_taken"
    UNAVAILABLE = "unavailable"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    TIMEOUT = "timeout"


# The gRPC status each code travels with, and the HTTP status the gateway answers with.
_STATUS: dict[Code, tuple[grpc.StatusCode, int]] = {
    Code.BAD_REQUEST: (grpc.StatusCode.INVALID_ARGUMENT, 400),
    Code.UNAUTHORIZED: (grpc.StatusCode.UNAUTHENTICATED, 401),
    Code.FORBIDDEN_SCOPE: (grpc.StatusCode.PERMISSION_DENIED, 403),
    Code.FORBIDDEN_ACTOR: (grpc.StatusCode.PERMISSION_DENIED, 403),
    Code.NOT_FOUND: (grpc.StatusCode.NOT_FOUND, 404),
    Code.CONFLICT: (grpc.StatusCode.ABORTED, 409),
    Code.SUPPORT_RECORD_DELETED: (grpc.StatusCode.NOT_FOUND, 410),
    Code.IDEMPOTENCY_CONFLICT: (grpc.StatusCode.ALREADY_EXISTS, 409),
    Code.BREADTH_REQUIRED: (grpc.StatusCode.INVALID_ARGUMENT, 422),
    Code.QUOTA_EXCEEDED: (grpc.StatusCode.RESOURCE_EXHAUSTED, 403),
    Code.RATE_LIMITED: (grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
    Code.DOMAIN_NOT_ALLOWED: (grpc.StatusCode.PERMISSION_DENIED, 403),
    Code.RECIPIENT_BLOCKED: (grpc.StatusCode.PERMISSION_DENIED, 403),
    Code.RECIPIENT_SUPPRESSED: (grpc.StatusCode.FAILED_PRECONDITION, 422),
    Code.NOT_CONFIGURED: (grpc.StatusCode.FAILED_PRECONDITION, 422),
    Code.DOMAIN_UNAVAILABLE: (grpc.StatusCode.FAILED_PRECONDITION, 422),
    Code.INTERNAL: (grpc.StatusCode.INTERNAL, 500),
    Code.REPLY_CONTEXT_REQUIRED: (grpc.StatusCode.INVALID_ARGUMENT, 422),
    Code.REPLY_CONTEXT_CHANGED: (grpc.StatusCode.ABORTED, 409),
    Code.REPLY_WORKFLOW_REQUIRED: (grpc.StatusCode.FAILED_PRECONDITION, 422),
    Code.REPLY_ALREADY_PENDING: (grpc.StatusCode.ALREADY_EXISTS, 409),
    Code.INTENT_REQUIRED: (grpc.StatusCode.INVALID_ARGUMENT, 422),
    Code.WRONG_STATE: (grpc.StatusCode.FAILED_PRECONDITION, 409),
    Code.TERMINAL: (grpc.StatusCode.FAILED_PRECONDITION, 409),
    Code.STALE: (grpc.StatusCode.ABORTED, 409),
    Code.BORN_STALE: (grpc.StatusCode.ABORTED, 409),
    Code.SEND_NEEDS_RECONCILIATION: (grpc.StatusCode.FAILED_PRECONDITION, 409),
    Code.GRADUATION_LOCKED: (grpc.StatusCode.FAILED_PRECONDITION, 409),
    Code.MATURITY_GATE_UNMET: (grpc.StatusCode.FAILED_PRECONDITION, 409),
    Code.SCOPE_TAKEN: (grpc.StatusCode.ALREADY_EXISTS, 409),
    Code.UNAVAILABLE: (grpc.StatusCode.UNAVAILABLE, 503),
    Code.PAYLOAD_TOO_LARGE: (grpc.StatusCode.INVALID_ARGUMENT, 413),
    Code.TIMEOUT: (grpc.StatusCode.DEADLINE_EXCEEDED, 504),
}

_TITLES: dict[Code, str] = {
    Code.INTENT_REQUIRED: "An intent is required",
    Code.STALE: "The revision you named is no longer current",
    Code.BORN_STALE: "The draft was built against older rules",
    Code.WRONG_STATE: "That verb is not legal in the review's current state",
    Code.TERMINAL: "The review is already closed",
    Code.SEND_NEEDS_RECONCILIATION: "A send attempt is awaiting reconciliation",
    Code.IDEMPOTENCY_CONFLICT: "The Idempotency-Key was used with a different body",
}


def http_status(code: Code) -> int:
    return _STATUS[code][1]


def title(code: Code) -> str:
    return _TITLES.get(code, code.value.replace("_", " ").capitalize())


@dataclass(frozen=True)
class FieldViolation:
    """A bad field: ``field`` is a JSON pointer into the request body (``/intent/summary``)."""

    field: str
    description: str


@dataclass
class DomainError(Exception):
    """A failure the caller can act on. ``detail`` must say the whole fix in one sentence or two."""

    code: Code
    detail: str
    state: str | None = None
    revision: int | None = None
    version: int | None = None
    allowed_actions: Sequence[str] = ()
    sent_message_id: str | None = None
    hints: Sequence[tuple[str, str]] = ()
    violations: Sequence[FieldViolation] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        super().__init__(f"{self.code}: {self.detail}")

    @property
    def grpc_code(self) -> grpc.StatusCode:
        return _STATUS[self.code][0]

    def to_status(self) -> status_pb2.Status:
        """Pack into ``google.rpc.Status`` with ErrorInfo, RecoveryFacts and BadRequest details.

        The status travels in a trailer, which gRPC caps at 8 KiB: the detail and the list of field
        violations are cut to fit, never dropped whole."""
        facts = common_pb2.RecoveryFacts(
            allowed_actions=list(self.allowed_actions),
            hints=[common_pb2.Hint(name=n, value=v) for n, v in self.hints],
        )
        if self.state is not None:
            facts.state = self.state
        if self.revision is not None:
            facts.revision = self.revision
        if self.version is not None:
            facts.version = self.version
        if self.sent_message_id is not None:
            facts.sent_message_id = self.sent_message_id
        details = [error_details_pb2.ErrorInfo(reason=self.code.value, domain=ERROR_DOMAIN), facts]
        if self.violations:
            details.append(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=v.field[:MAX_FIELD_CHARS], description=v.description[:MAX_FIELD_CHARS]
                        )
                        for v in self.violations[:MAX_VIOLATIONS]
                    ]
                )
            )
        packed = []
        for message in details:
            any_msg = any_pb2.Any()
            any_msg.Pack(message)
            packed.append(any_msg)
        detail = (
            self.detail if len(self.detail) <= MAX_DETAIL_CHARS else self.detail[: MAX_DETAIL_CHARS - 1] + "…"
        )
        return status_pb2.Status(code=self.grpc_code.value[0], message=detail, details=packed)


def invalid(field_pointer: str, description: str, code: Code = Code.BAD_REQUEST) -> DomainError:
    """A one-field validation error whose detail names the field."""
    return DomainError(
        code, f"{field_pointer}: {description}", violations=(FieldViolation(field_pointer, description),)
    )


# A backend's transport failures, as the gateway reports them.
_TRANSPORT: dict[grpc.StatusCode, Code] = {
    grpc.StatusCode.UNAVAILABLE: Code.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: Code.TIMEOUT,
    grpc.StatusCode.CANCELLED: Code.UNAVAILABLE,
}


def from_rpc_error(error: grpc.aio.AioRpcError) -> DomainError:
    """Rebuild the DomainError a service raised, or classify a transport failure."""
    try:
        status = rpc_status.from_call(error)
    except ValueError:  # a status whose trailer does not match its code: treat as transport trouble
        status = None
    if status is None or status.code == code_pb2.OK:
        code = _TRANSPORT.get(error.code(), Code.INTERNAL)
        detail = (
            "A backend service is unavailable; retry shortly."
            if code is not Code.INTERNAL
            else ("The server failed to handle the request.")
        )
        return DomainError(code, detail)
    result = DomainError(Code.INTERNAL, status.message)
    for detail_any in status.details:
        if detail_any.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail_any.Unpack(info)
            try:
                result.code = Code(info.reason)
            except ValueError:
                result.code = Code.INTERNAL
        elif detail_any.Is(common_pb2.RecoveryFacts.DESCRIPTOR):
            facts = common_pb2.RecoveryFacts()
            detail_any.Unpack(facts)
            result.state = facts.state if facts.HasField("state") else None
            result.revision = facts.revision if facts.HasField("revision") else None
            result.version = facts.version if facts.HasField("version") else None
            result.sent_message_id = facts.sent_message_id if facts.HasField("sent_message_id") else None
            result.allowed_actions = tuple(facts.allowed_actions)
            result.hints = tuple((h.name, h.value) for h in facts.hints)
        elif detail_any.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail_any.Unpack(bad)
            result.violations = tuple(FieldViolation(v.field, v.description) for v in bad.field_violations)
    return result
