"""nudge's use cases, one module per plane, one transaction (unit of work) each:

- ``ingest``: the outbox relays' batches stored once each (``Ingest``);
- ``reads``: pages, long-polls and streams of the caller's un-acked nudges and broadcasts (``ListEvents``,
  ``WaitForEvents``, ``Subscribe``);
- ``acks``: ack cursors and broadcast acks (``Ack``), and the retention sweep;
- ``webhooks``: the webhook endpoints an admin registers and the delivery loop (the ``*Webhook*`` RPCs,
  the sender job); ``webhook_queue``: the deliveries each nudge queues in its own transaction;
- ``env``: ``Settings`` and ``Env``, what they all run with (``nudge.bootstrap`` builds it).

Spec 000, "Nudge": a durable, idempotent work item; ``seq`` is the per-review ordinal the ack cursor
advances against; "Terminal events": exactly one terminal nudge per review, the last and highest ``seq``.
"""

from nudge.app import webhooks
from nudge.app.acks import (
    MAX_ACKS,
    Acked,
    AckReply,
    ack,
    ack_with_cursors,
    acknowledge,
    compact,
    sweep_forever,
)
from nudge.app.env import WEEK, Env, Settings
from nudge.app.ingest import SUBSCRIPTIONS, Stored, _lock_projects, ingest, on_commit
from nudge.app.reads import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    WAIT_MAX_S,
    WAIT_MIN_S,
    Page,
    cursors,
    front_cursors,
    is_broadcast,
    list_events,
    list_with_cursors,
    subscribe,
    wait_for_events,
    wait_with_cursors,
)
from nudge.store import Nudge
from nudge.wakeup import RECHECK_S

__all__ = [
    "LIST_LIMIT_DEFAULT",
    "LIST_LIMIT_MAX",
    "MAX_ACKS",
    "RECHECK_S",
    "SUBSCRIPTIONS",
    "WAIT_MAX_S",
    "WAIT_MIN_S",
    "WEEK",
    "AckReply",
    "Acked",
    "Env",
    "Nudge",
    "Page",
    "Settings",
    "Stored",
    "_lock_projects",
    "ack",
    "ack_with_cursors",
    "acknowledge",
    "compact",
    "cursors",
    "front_cursors",
    "ingest",
    "is_broadcast",
    "list_events",
    "list_with_cursors",
    "on_commit",
    "subscribe",
    "sweep_forever",
    "wait_for_events",
    "wait_with_cursors",
    "webhooks",
]
