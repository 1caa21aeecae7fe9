"""The DiffService servicer (its RPCs arrive with the diff issue)."""

from __future__ import annotations

from collections.abc import Sequence

from reviewloop.diff.v1 import diff_pb2_grpc
from reviewloop.service import Peers, Registration
from reviewloop.storage import Database


class DiffServicer(diff_pb2_grpc.DiffServiceServicer):
    def __init__(self, db: Database) -> None:
        self.db = db


def servicers(db: Database, peers: Peers) -> Sequence[Registration]:
    return [
        (diff_pb2_grpc.add_DiffServiceServicer_to_server, DiffServicer(db), "reviewloop.diff.v1.DiffService")
    ]
