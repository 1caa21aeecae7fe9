"""The DispatchBudgetService servicer (its RPCs arrive with the dispatch_budget issue)."""

from __future__ import annotations

from collections.abc import Sequence

from reviewloop.budget.v1 import budget_pb2_grpc
from reviewloop.service import Peers, Registration
from reviewloop.storage import Database


class DispatchBudgetServicer(budget_pb2_grpc.DispatchBudgetServiceServicer):
    def __init__(self, db: Database) -> None:
        self.db = db


def servicers(db: Database, peers: Peers) -> Sequence[Registration]:
    return [
        (
            budget_pb2_grpc.add_DispatchBudgetServiceServicer_to_server,
            DispatchBudgetServicer(db),
            "reviewloop.budget.v1.DispatchBudgetService",
        )
    ]
