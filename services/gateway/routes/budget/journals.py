"""Attempt journals (spec 002): a run's events appended as JSON lines (or ``{"events": [...]}``), and the
evidence marker its journal settles to."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response
from reviewloop.budget.v1 import budget_pb2
from reviewloop.errors import Code, DomainError, invalid
from reviewloop.shapes import EvidenceStatus, JournalAppendResult, JournalIn, JournalPage

from gateway.backends import Backends, backends
from gateway.responses import ShapedRoute, encoded
from gateway.routes.budget import JSONL, Caller
from gateway.translate import Json

router = APIRouter(tags=["dispatch budget"], route_class=ShapedRoute)
Backend = Annotated[Backends, Depends(backends)]


async def _journal_events(request: Request) -> list[str]:
    """The request's events as JSON texts: a JSON-lines body, or {"events": [...]}."""
    raw = await request.body()
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in JSONL:
        # JSON lines split on "\n" only: U+2028, U+2029 and U+0085 are legal inside JSON strings.
        return [line for line in raw.decode(errors="replace").split("\n") if line.strip(" \t\r")]
    try:
        body = JournalIn.model_validate(orjson.loads(raw))
    except orjson.JSONDecodeError:
        raise DomainError(
            Code.BAD_REQUEST, "The request body is not valid JSON; send a JSON object."
        ) from None
    except ValueError as exc:
        raise invalid(
            "/events", f"give an events array of at most 500 objects ({exc.__class__.__name__})"
        ) from None
    return [orjson.dumps(e).decode() for e in body.events]


@router.post(
    "/v1/journals/{run_id}/events",
    status_code=201,
    operation_id="append_journal_events",
    response_model=JournalAppendResult,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                # The body is read by hand (JSON lines or JSON), then validated as JournalIn.
                "application/json": {"schema": {"$ref": f"#/components/schemas/{JournalIn.__name__}"}},
                "application/x-ndjson": {"schema": {"type": "string"}},
            },
        }
    },
)
async def append_journal_events(run_id: str, request: Request, principal: Caller, backend: Backend) -> Json:
    events = await _journal_events(request)
    reply = await backend.budget.AppendJournalEvents(
        budget_pb2.AppendJournalEventsRequest(
            principal=principal.to_proto(), run_id=run_id, events_json=events
        ),
        timeout=backend.timeout_s,
    )
    return {
        "appended": reply.appended,
        "skipped_ephemeral": reply.skipped_ephemeral,
        "last_offset": reply.last_offset,
        "already_journaled": reply.already_journaled,
    }


@router.get(
    "/v1/journals/{run_id}/evidence", operation_id="get_evidence_status", response_model=EvidenceStatus
)
async def get_evidence_status(run_id: str, principal: Caller, backend: Backend) -> Json:
    reply = await backend.budget.GetEvidenceStatus(
        budget_pb2.GetEvidenceStatusRequest(principal=principal.to_proto(), run_id=run_id),
        timeout=backend.timeout_s,
    )
    body: Json = {"run_id": run_id, "evidence": reply.evidence}
    if reply.offset:
        body["offset"] = reply.offset
        body["schema_version"] = reply.schema_version
    if reply.evidence_rejected_json:
        body["evidence_rejected"] = orjson.loads(reply.evidence_rejected_json)
    return body


@router.get(
    "/v1/journals/{run_id}/events",
    operation_id="read_journal_events",
    response_model=JournalPage,
    responses={
        200: {
            "description": "The records after `after`, one JSON line each: the line its producer "
            "appended, byte for byte, except for the offsets `X-Reencoded` lists (comma-separated; "
            "present only when there are any), whose line is the service's canonical JSON, keys "
            "sorted: records journaled before lines were kept, and bare events the service composed "
            "into the envelope. `Accept: application/json` answers them as a JournalPage "
            "(`reencoded`). `X-Next-After` names the offset the next page reads after, present only "
            "when more records follow.",
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        }
    },
)
async def read_journal_events(
    run_id: str,
    principal: Caller,
    backend: Backend,
    request: Request,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> Response:
    """The run's journal read back as JSON lines: every record as the producer wrote it (its
    schema_version, unknown types, the 1.2.0 hash chain), in offset order, paged by offset; a
    re-encoded one is named in ``X-Reencoded``."""
    reply = await backend.budget.ReadJournalEvents(
        budget_pb2.ReadJournalEventsRequest(
            principal=principal.to_proto(), run_id=run_id, after_offset=after, limit=limit
        ),
        timeout=backend.timeout_s,
    )
    headers = {"X-Next-After": str(reply.last_offset)} if reply.more else {}
    if reply.reencoded_offsets:
        headers["X-Reencoded"] = ",".join(str(offset) for offset in reply.reencoded_offsets)
    accept = request.headers.get("accept", "")
    if "application/json" in accept and not any(kind in accept for kind in JSONL):
        return encoded(
            {
                "events": [orjson.loads(line) for line in reply.lines],
                "next_after": reply.last_offset if reply.more else None,
                "reencoded": list(reply.reencoded_offsets),
            }
        )
    return Response("".join(reply.lines).encode(), media_type="application/x-ndjson", headers=headers)
