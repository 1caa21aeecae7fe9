"""dispatch_budget use cases: one function per RPC, one unit of work each (the gate's classifier call
runs between two), one module per plane:

- ``autosend``: the daily auto-send caps;
- ``pool``: the shared-pool auto-send governor (deployment-wide, per sending domain);
- ``rounds``: spec 003 runs, admissions, settlements, scoped extensions;
- ``catalog``: spec 003 runners, the project review configuration, sequences, mode, lineage binding;
- ``gate``: spec 001 turns, decisions and the decision log;
- ``journals``: spec 002 attempt journals and their evidence.

``from dispatch_budget import app; app.admit_review_round(...)`` reaches every use case and the
records they answer."""

from __future__ import annotations

from dispatch_budget.app.autosend import AutoSend, consume_auto_send
from dispatch_budget.app.catalog import (
    bind_review_session,
    complete_review_session,
    get_review_config,
    heartbeat_review_session,
    list_runners,
    register_runner,
    resolve_mode,
    set_review_config,
    validate_review_sequence,
)
from dispatch_budget.app.gate import (
    TurnResult,
    decide_review,
    end_overdue_reviews,
    finish_review,
    get_gate_config,
    list_gate_decisions,
    record_turn,
    set_gate_config,
    set_review_enabled,
)
from dispatch_budget.app.journals import (
    Appended,
    Evidence,
    append_journal_events,
    get_evidence_status,
    read_journal,
    read_journal_lines,
)
from dispatch_budget.app.pool import (
    OUTCOMES,
    PoolSend,
    PoolsToday,
    consume_pool_send,
    list_send_pools,
    pool_subscriptions,
    settle_pool_send,
)
from dispatch_budget.app.rounds import (
    Admission,
    admit_review_round,
    extend_review_budget,
    get_ready_gate,
    get_round_budget,
    get_run,
    record_run,
    settle_attempt,
)
from dispatch_budget.domain.gate import Turn
from dispatch_budget.domain.lineage import Binding, BindRequest
from dispatch_budget.domain.rounds import (
    AdmissionRequest,
    Budget,
    ExtensionReceipt,
    LaunchRefusal,
    Origin,
    ReadyGate,
    Receipt,
    Run,
    RunModes,
    RunSnapshot,
)

__all__ = [
    "OUTCOMES",
    "Admission",
    "AdmissionRequest",
    "Appended",
    "AutoSend",
    "BindRequest",
    "Binding",
    "Budget",
    "Evidence",
    "ExtensionReceipt",
    "LaunchRefusal",
    "Origin",
    "PoolSend",
    "PoolsToday",
    "ReadyGate",
    "Receipt",
    "Run",
    "RunModes",
    "RunSnapshot",
    "Turn",
    "TurnResult",
    "admit_review_round",
    "append_journal_events",
    "bind_review_session",
    "complete_review_session",
    "consume_auto_send",
    "consume_pool_send",
    "decide_review",
    "end_overdue_reviews",
    "extend_review_budget",
    "finish_review",
    "get_evidence_status",
    "get_gate_config",
    "get_ready_gate",
    "get_review_config",
    "get_round_budget",
    "get_run",
    "heartbeat_review_session",
    "list_gate_decisions",
    "list_runners",
    "list_send_pools",
    "pool_subscriptions",
    "read_journal",
    "read_journal_lines",
    "record_run",
    "record_turn",
    "register_runner",
    "resolve_mode",
    "set_gate_config",
    "set_review_config",
    "set_review_enabled",
    "settle_attempt",
    "settle_pool_send",
    "validate_review_sequence",
]
