"""Boot: ``python -m rules``."""

from collections.abc import Sequence

from reviewloop.nudge.v1 import nudge_pb2
from reviewloop.review.v1 import review_pb2
from reviewloop.service import Job, ServiceSpec, main

from rules import server
from rules.app import Env, ensure_token_key
from rules.bootstrap import RulesEnvironment, bootstrap


def background(env: Env) -> Sequence[Job]:
    # The composition-token signing key is derived at boot from the deployment's key (the store keeps
    # its salt, never a key); legacy keys kept in plain are retired.
    return [lambda: ensure_token_key(env)]


SPEC = ServiceSpec.of(
    __package__,
    settings=RulesEnvironment,
    bootstrap=lambda db, _peers, read: bootstrap(db, read),
    servicers=server.servicers,
    subscribers={
        "review_state": review_pb2.DESCRIPTOR.services_by_name["ReviewStateService"].full_name,
        "nudge": nudge_pb2.DESCRIPTOR.services_by_name["NudgeService"].full_name,
    },
    background=background,
)

if __name__ == "__main__":
    main(SPEC)
