"""The RulesService servicer."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc
from reviewloop.common.v1 import common_pb2
from reviewloop.rules.v1 import rules_pb2_grpc
from reviewloop.service import Peers, Registration
from reviewloop.storage import Database, first_delivery

log = logging.getLogger(__name__)


class RulesServicer(rules_pb2_grpc.RulesServiceServicer):
    def __init__(self, db: Database) -> None:
        self.db = db

    async def Ingest(
        self, request: common_pb2.IngestRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.IngestResponse:
        """Review outcomes from review_state; deduplicated on event_id. The maturity counters that
        consume them arrive with the rules issue; until then each is recorded as received."""
        accepted = duplicates = 0
        for event in request.events:
            async with self.db.transaction() as uow:
                if await first_delivery(uow.conn, event.event_id):
                    accepted += 1
                    log.info("rules ignores event type %s (%s)", event.type, event.event_id)
                else:
                    duplicates += 1
        return common_pb2.IngestResponse(accepted=accepted, duplicates=duplicates)


def servicers(db: Database, peers: Peers) -> Sequence[Registration]:
    return [
        (
            rules_pb2_grpc.add_RulesServiceServicer_to_server,
            RulesServicer(db),
            "reviewloop.rules.v1.RulesService",
        )
    ]
