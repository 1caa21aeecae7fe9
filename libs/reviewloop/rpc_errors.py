"""The gRPC edge of the error model: a ``DomainError`` packed into ``google.rpc.Status`` and back.

The server interceptor packs (``ErrorInfo.reason`` = the problem code, plus ``RecoveryFacts`` and
``BadRequest``); clients and the gateway unpack with ``from_rpc_error``. Domains never import this.
"""

from __future__ import annotations

from typing import cast

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from reviewloop.common.v1 import common_pb2
from reviewloop.errors import Code, DomainError, FieldViolation

ERROR_DOMAIN = "reviewloop.dev"
# Bounds that keep a packed status under gRPC's 8 KiB metadata limit.
MAX_DETAIL_CHARS = 2000
MAX_VIOLATIONS = 25
MAX_FIELD_CHARS = 120

# The gRPC status each code travels with (its HTTP status is in reviewloop.errors).
_GRPC_STATUS: dict[Code, grpc.StatusCode] = {
    Code.BAD_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    Code.UNAUTHORIZED: grpc.StatusCode.UNAUTHENTICATED,
    Code.FORBIDDEN_SCOPE: grpc.StatusCode.PERMISSION_DENIED,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.CONFLICT: grpc.StatusCode.ABORTED,
    Code.SUPPORT_RECORD_DELETED: grpc.StatusCode.NOT_FOUND,
    Code.IDEMPOTENCY_CONFLICT: grpc.StatusCode.ALREADY_EXISTS,
    Code.BREADTH_REQUIRED: grpc.StatusCode.INVALID_ARGUMENT,
    Code.QUOTA_EXCEEDED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Code.RATE_LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Code.DOMAIN_NOT_ALLOWED: grpc.StatusCode.PERMISSION_DENIED,
    Code.RECIPIENT_BLOCKED: grpc.StatusCode.PERMISSION_DENIED,
    Code.RECIPIENT_SUPPRESSED: grpc.StatusCode.FAILED_PRECONDITION,
    Code.NOT_CONFIGURED: grpc.StatusCode.FAILED_PRECONDITION,
    Code.DOMAIN_UNAVAILABLE: grpc.StatusCode.FAILED_PRECONDITION,
    Code.INTERNAL: grpc.StatusCode.INTERNAL,
    Code.REPLY_CONTEXT_REQUIRED: grpc.StatusCode.INVALID_ARGUMENT,
    Code.REPLY_CONTEXT_CHANGED: grpc.StatusCode.ABORTED,
    Code.REPLY_WORKFLOW_REQUIRED: grpc.StatusCode.FAILED_PRECONDITION,
    Code.REPLY_ALREADY_PENDING: grpc.StatusCode.ALREADY_EXISTS,
    Code.INTENT_REQUIRED: grpc.StatusCode.INVALID_ARGUMENT,
    Code.WRONG_STATE: grpc.StatusCode.FAILED_PRECONDITION,
    Code.TERMINAL: grpc.StatusCode.FAILED_PRECONDITION,
    Code.STALE: grpc.StatusCode.ABORTED,
    Code.BORN_STALE: grpc.StatusCode.ABORTED,
    Code.SEND_NEEDS_RECONCILIATION: grpc.StatusCode.FAILED_PRECONDITION,
    Code.GRADUATION_LOCKED: grpc.StatusCode.FAILED_PRECONDITION,
    Code.MATURITY_GATE_UNMET: grpc.StatusCode.FAILED_PRECONDITION,
    Code.SCOPE_TAKEN: grpc.StatusCode.ALREADY_EXISTS,
    Code.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
}


def grpc_code(error: DomainError) -> grpc.StatusCode:
    """The gRPC status code ``error`` travels with."""
    return _GRPC_STATUS[error.code]


def to_status(error: DomainError) -> status_pb2.Status:
    """Pack into ``google.rpc.Status`` with ErrorInfo, RecoveryFacts and BadRequest details.

    The status travels in a trailer, which gRPC caps at 8 KiB: the detail and the list of field
    violations are cut to fit, never dropped whole.
    """
    facts = common_pb2.RecoveryFacts(
        allowed_actions=list(error.allowed_actions),
        hints=[common_pb2.Hint(name=n, value=v) for n, v in error.hints],
    )
    if error.state is not None:
        facts.state = error.state
    if error.revision is not None:
        facts.revision = error.revision
    if error.version is not None:
        facts.version = error.version
    if error.sent_message_id is not None:
        facts.sent_message_id = error.sent_message_id
    details = [error_details_pb2.ErrorInfo(reason=error.code.value, domain=ERROR_DOMAIN), facts]
    if error.violations:
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=v.field[:MAX_FIELD_CHARS], description=v.description[:MAX_FIELD_CHARS]
                    )
                    for v in error.violations[:MAX_VIOLATIONS]
                ]
            )
        )
    packed = []
    for message in details:
        any_msg = any_pb2.Any()
        any_msg.Pack(message)
        packed.append(any_msg)
    detail = (
        error.detail if len(error.detail) <= MAX_DETAIL_CHARS else error.detail[: MAX_DETAIL_CHARS - 1] + "…"
    )
    return status_pb2.Status(code=grpc_code(error).value[0], message=detail, details=packed)


# A backend's transport failures, as the gateway reports them: all ``unavailable`` (retry shortly), a
# deadline with its own 504 (the spec has no code for it).
_TRANSPORT: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.CANCELLED: 503,
}


def from_rpc_error(error: grpc.aio.AioRpcError) -> DomainError:
    """Rebuild the DomainError a service raised, or classify a transport failure."""
    try:
        # An AioRpcError carries code(), details() and trailing_metadata(): all that from_call reads.
        status = rpc_status.from_call(cast(grpc.Call, error))
    except ValueError:  # a status whose trailer does not match its code: treat as transport trouble
        status = None
    if status is None or status.code == code_pb2.OK:
        http = _TRANSPORT.get(error.code())
        if http is None:
            return DomainError(Code.INTERNAL, "The server failed to handle the request.")
        return DomainError(Code.UNAVAILABLE, "A backend service is unavailable; retry shortly.", status=http)
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
