"""The DiffService servicer: translate protobuf, call ``app``, return protobuf."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import json_format
from reviewloop import service
from reviewloop.common.v1 import common_pb2
from reviewloop.diff.v1 import diff_pb2, diff_pb2_grpc
from reviewloop.service import Registration
from reviewloop.storage import Database
from reviewloop.tenancy import Principal

from diff import app
from diff.domain.fields import Attachment, MessageFields
from diff.store import DiffKey, StoredDiff


def fields_from_proto(message: diff_pb2.MessageFields) -> MessageFields:
    return MessageFields(
        subject=message.subject,
        body_text=message.body_text,
        body_html=message.body_html,
        to=tuple(message.to),
        cc=tuple(message.cc),
        bcc=tuple(message.bcc),
        reply_to=message.reply_to,
        headers=dict(message.headers),
        attachments=tuple(
            Attachment(a.filename, a.content_type, a.content_sha256) for a in message.attachments
        ),
    )


def diff_to_proto(diff: StoredDiff) -> diff_pb2.Diff:
    structured = json_format.Parse(diff.diff_json, diff_pb2.DiffJson())
    return diff_pb2.Diff(
        structured=structured,
        review_id=diff.key.review_id,
        from_revision=diff.key.from_revision,
        to_revision=diff.key.to_revision,
        diff_unified=diff.diff_unified,
        diff_json=diff.diff_json,
        fields_changed=list(diff.fields_changed),
        input_sha256=diff.input_sha256,
    )


def _key(request: diff_pb2.ComputeDiffRequest | diff_pb2.GetDiffRequest) -> DiffKey:
    project_id = Principal.from_proto(request.principal).project_id
    return DiffKey(project_id, request.review_id, request.from_revision, request.to_revision)


class DiffServicer(diff_pb2_grpc.DiffServiceServicer):
    def __init__(self, db: Database) -> None:
        self.db = db

    async def ComputeDiff(
        self,
        request: diff_pb2.ComputeDiffRequest,
        context: grpc.aio.ServicerContext[diff_pb2.ComputeDiffRequest, diff_pb2.Diff],
    ) -> diff_pb2.Diff:
        """Compute and store, or read back, the diff of ``before`` -> ``after`` under the key.

        Errors: INVALID_ARGUMENT ``bad_request`` (bad key, a field over 2 MiB, a bad attachment hash;
        nothing stored), ABORTED ``conflict`` (the key holds a diff of other inputs)."""
        key = _key(request)
        stored = await app.compute_diff(
            self.db,
            key,
            fields_from_proto(request.before),
            fields_from_proto(request.after),
            dry_run=request.dry_run,
        )
        return diff_to_proto(stored)

    async def GetDiff(
        self,
        request: diff_pb2.GetDiffRequest,
        context: grpc.aio.ServicerContext[diff_pb2.GetDiffRequest, diff_pb2.Diff],
    ) -> diff_pb2.Diff:
        """The stored diff under the key. Errors: NOT_FOUND ``not_found``, INVALID_ARGUMENT ``bad_request``."""
        return diff_to_proto(await app.get_diff(self.db, _key(request)))

    async def DiffWords(
        self,
        request: diff_pb2.DiffWordsRequest,
        context: grpc.aio.ServicerContext[diff_pb2.DiffWordsRequest, diff_pb2.WordDiff],
    ) -> diff_pb2.WordDiff:
        """The word-level diff of two texts. Errors: INVALID_ARGUMENT ``bad_request`` (over 2 MiB)."""
        segments = await app.diff_words(request.before, request.after)
        return diff_pb2.WordDiff(
            segments=[diff_pb2.WordSegment(op=s.op, before=s.before, after=s.after) for s in segments]
        )

    async def Ingest(
        self,
        request: common_pb2.IngestRequest,
        context: grpc.aio.ServicerContext[common_pb2.IngestRequest, common_pb2.IngestResponse],
    ) -> common_pb2.IngestResponse:
        """review_state's committed diffs, each stored once (deduplicated on event_id)."""
        return await service.ingest(self.db, request, app.SUBSCRIPTIONS)


def servicers(db: Database) -> Sequence[Registration]:
    return [
        (diff_pb2_grpc.add_DiffServiceServicer_to_server, DiffServicer(db), "reviewloop.diff.v1.DiffService")
    ]
