"""Dispatch budget shapes: review rounds and the selection catalog (spec 003), attempt journals (spec 002), the review-run gate (spec 001)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    JsonValue,
    RootModel,
    StrictInt,
    WithJsonSchema,
)

from reviewloop.shapes._base import INT64_MAX, ActorKindName, FullSha, JsonInteger, Sha, Shape, Storable

# A runner, model or effort name (reviewloop.review_dispatch.selection.NAME).
RUNNER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,79}$"

# --- dispatch budget: review rounds (spec 003) ------------------------------------------------------


class Mode(StrEnum):
    """A review mode of spec 003."""

    WARM = "warm"
    COLD = "cold"


RunStatusName = Literal["active", "failed", "interrupted", "published", "archived"]
AttemptKindName = Literal["initial", "retry", "pipeline", "standalone", "publish_gate", "recheck"]
LaunchTriggerName = Literal[
    "operator_request",
    "continue_fixing",
    "send_back",
    "fix_rereview",
    "recovered_fix_rereview",
    "publication_plan",
]


class SelectionIn(Shape):
    """A review selection: exactly runner, model, effort and mode."""

    runner: str = Field(min_length=1, max_length=80)
    model: str = Field(default="", max_length=80)
    effort: str = Field(default="", max_length=40)
    mode: Mode


class RunIn(Shape):
    """``record_review_run``: a run's record; an omitted field keeps what the run has."""

    repository: str = Field(default="", max_length=200)
    pr_number: int = Field(default=0, ge=0, le=INT64_MAX)
    head_sha: Sha = ""
    status: RunStatusName | None = None
    # The run's rungs of resolveReviewMode; omitted keeps what the run has.
    review_mode: Mode | None = None
    pr_work_review_mode: Mode | None = None
    repeat_review_context_mode: Mode | None = None
    # The run's reviewSequence: row 1 selects its pipeline review; its rows are the qualifying
    # reviews publication requires. Omitted keeps what the run has.
    review_sequence: list[SelectionIn] | None = Field(default=None, min_length=1, max_length=10)


class AdmitIn(Shape):
    """``admit_review_round``: ask the round budget for one reviewer round."""

    run_id: str = Field(min_length=1, max_length=80)
    attempt_key: str = Field(default="", max_length=200)
    kind: AttemptKindName
    trigger: LaunchTriggerName
    head_sha: Sha = ""
    selection: SelectionIn | None = None
    receipt_id: str = Field(default="", max_length=40)
    # The spec 001 session whose review in flight this is (its timeoutMinutes settles the attempt),
    # and the reviewer session it runs in (qualifying reviews count per separate session).
    session_id: str = Field(default="", max_length=80)
    review_session_id: str = Field(default="", max_length=40)


class DiffScopeRow(Shape):
    """One changed path of a verdict's Diff scope table."""

    path: str = Field(min_length=1, max_length=1000)
    why: str = Field(max_length=2000)
    in_scope: bool


class DiffScopeTable(Shape):
    """Spec 003: every verdict includes its Diff scope table.

    ``base`` is the publication base the inventory covers (a WARM review's too), ``head`` the reviewed
    head.
    """

    base: Sha
    head: Sha
    rows: list[DiffScopeRow] = Field(max_length=5000)


class SettleIn(Shape):
    """``settle_review_attempt``: a verdict, or why there is none."""

    verdict: Literal["pass", "issues"] | None = None
    reviewed_head: Sha = ""
    no_verdict_reason: str = Field(default="", max_length=40)
    journal_run_id: str = Field(default="", max_length=80)
    # A reported verdict's Diff scope table (spec 003); a journal settlement reads the closing
    # record's payload ``diff_scope``.
    diff_scope: DiffScopeTable | None = None


class ExtendIn(Shape):
    """run.extendReviewBudget. ``approved_by`` is accepted and ignored: authority comes from the key."""

    head_sha: FullSha
    limit: StrictInt = Field(ge=1, le=1000)
    expected_limit: StrictInt = Field(ge=1, le=1000)
    scope_brief: str = Field(max_length=4000)
    request_id: str = Field(default="", max_length=255)
    approved_by: str | None = Field(default=None, max_length=200)


class ReviewRun(Shape):
    """A review run as recorded: its status, its budget scope and its rungs of resolveReviewMode."""

    run_id: str
    status: RunStatusName
    scope_key: str
    repository: str | None = None
    pr_number: int | None = None
    head_sha: str | None = None
    review_mode: Mode | None = None
    pr_work_review_mode: Mode | None = None
    repeat_review_context_mode: Mode | None = None
    review_sequence: list[SelectionIn] | None = None
    # The run's owner (actor kind:id, e.g. ``service:key_...``): who created it, the only non-admin that
    # may change its status. Absent for runs created before owners were kept.
    created_by: str | None = None


class Settlement(Shape):
    """How an admitted round settled."""

    outcome: Literal["counted", "no_verdict"]
    settled_at: datetime
    reason: str | None = None
    verdict: str | None = None
    # What the verdict rests on: accepted | rejected | absent | unknown (the journal's marker) or
    # reported (the runner's word); only accepted journal evidence makes a passing review.
    evidence: str | None = None
    reviewed_head: str | None = None
    journal_run_id: str | None = None
    diff_scope: dict[str, JsonValue] | None = None


class AdmissionReceipt(Shape):
    """An admitted reviewer round: what it spent, for which head, and how it settled."""

    receipt_id: str
    run_id: str
    scope_key: str
    attempt_key: str
    kind: AttemptKindName
    trigger: LaunchTriggerName
    head_sha: str
    round: int
    admitted_at: datetime
    selection: SelectionIn | None = None
    settlement: Settlement | None = None
    # The admission owner (actor kind:id), the only principal that settles the round. Absent for
    # receipts admitted before owners were kept.
    admitted_by: str | None = None


class RequestOrigin(Shape):
    """Who granted an extension, and from where."""

    actor_kind: ActorKindName
    actor_id: str
    key_id: str | None = None
    remote_addr: str | None = None
    user_agent: str | None = None


class ExtensionReceipt(Shape):
    """A scoped budget extension, granted by a project admin for one head."""

    receipt_id: str
    request_id: str
    run_id: str
    scope_key: str
    approved_head: str
    prior_limit: int
    new_limit: int
    scope_brief: str
    origin: RequestOrigin
    granted_at: datetime
    repository: str | None = None
    pr_number: int | None = None


class LaunchRefusal(Shape):
    """The last reviewer launch the budget refused, and why."""

    run_id: str
    attempt_key: str
    trigger: LaunchTriggerName
    no_verdict: int
    reason: str
    refused_at: datetime


class RoundBudget(Shape):
    """The reviewer round budget of a scope: what is used, the limit, and why a launch was refused."""

    scope_key: str
    used: int
    limit: int
    admissions: int
    no_verdict: int
    no_verdict_limit: int
    label: str
    exhausted: bool
    no_verdict_capped: bool
    extension: ExtensionReceipt | None = None
    last_launch_refusal: LaunchRefusal | None = None


class AdmissionResult(Shape):
    """``admit_review_round``: the receipt, and the budget after it."""

    receipt: AdmissionReceipt
    reattached: bool
    review_round_budget: RoundBudget


class GateRow(Shape):
    """A row of the run's review sequence at the gate: 1-based; a free slot has no selection."""

    row: int
    selection: SelectionIn | None = None
    receipt_id: str | None = None
    review_session_id: str | None = None


class RefusedReview(Shape):
    """A review of the gate's head that does not count, and why."""

    receipt_id: str
    reason: str


class ReadyGate(Shape):
    """The ready-gate payload: the round budget display snapshot and qualifying vs required reviews."""

    run_id: str
    head_sha: str
    review_round_budget: RoundBudget
    qualifying_reviews: int
    required_reviews: int
    publishable: bool
    blockers: list[str]
    # Each qualifying review and the sequence row it fills; the rows still to request (row 1 also
    # selects the pipeline review); the reviews of this head the gate refused, and why.
    filled_rows: list[GateRow] = []
    remaining_rows: list[GateRow] = []
    refused_reviews: list[RefusedReview] = []


class SettlementResult(Shape):
    """``settle_review_attempt``: the settled receipt, and the budget after it."""

    receipt: AdmissionReceipt
    review_round_budget: RoundBudget


# --- dispatch budget: the selection catalog, sequences, mode, lineage (spec 003) --------------------


class RunnerIn(Shape):
    """A reviewer runner of the selection catalog and what it supports."""

    name: str = Field(min_length=1, max_length=80, pattern=RUNNER_NAME)
    models: list[Annotated[str, Field(max_length=80, pattern=RUNNER_NAME)]] = Field(
        min_length=1, max_length=50, json_schema_extra={"uniqueItems": True}
    )
    efforts: list[Annotated[str, Field(max_length=40, pattern=RUNNER_NAME)]] = Field(
        min_length=1, max_length=50, json_schema_extra={"uniqueItems": True}
    )
    default_model: str = Field(max_length=80)
    default_effort: str = Field(max_length=40)
    supports_warm: bool = True
    supports_model_change: bool = False


class RunnerList(Shape):
    """``list_runners``: the selection catalog."""

    runners: list[RunnerIn]


class ReviewConfigIn(RootModel[Annotated[dict[str, Any], Storable]]):
    """The project review configuration; its ``review.mode`` is the project default mode."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"review": {"mode": "warm"}}]})


class ReviewConfig(Shape):
    """The stored project review configuration and the project default mode it sets."""

    config: dict[str, JsonValue]
    mode: Mode | None = None


class SequenceIn(Shape):
    """The rows go through the shared validator in the service, which names each bad row's field."""

    sequence: Annotated[
        Any,
        Storable,
        # Published as what the validator takes: one to 10 selections (MAX_SEQUENCE_ROWS).
        WithJsonSchema(
            {
                "type": "array",
                "minItems": 1,
                "maxItems": 10,
                "items": {"$ref": "#/components/schemas/SelectionIn"},
            }
        ),
    ]


class SequenceValidation(Shape):
    """A review sequence as validated: its rows, and the request_review it resolves to."""

    sequence: list[SelectionIn]
    request_review: JsonValue


class ModeIn(Shape):
    """``resolve_review_mode``: the rungs given; a stored run's fill those left unset."""

    explicit: Mode | None = None
    run: Mode | None = None
    pr_work: Mode | None = None
    repeat_context: Mode | None = None
    project_default: Mode | None = None
    project_config: Annotated[dict[str, Any], Storable] | None = None
    # A stored run: its rungs fill those left unset here.
    run_id: str = Field(default="", max_length=80)


class ResolvedReviewMode(Shape):
    """The mode resolveReviewMode settles on, and the rung that decided it."""

    mode: Mode
    source: str = Field(description="the rung of resolveReviewMode that decided")


class BindIn(Shape):
    """``bind_review_session``: bind a review lineage to a reviewer session."""

    repository: str = Field(min_length=1, max_length=200)
    pr_number: int = Field(ge=1, le=INT64_MAX)
    selection: SelectionIn
    base_sha: FullSha
    head_sha: FullSha
    review_id: str = Field(default="", max_length=80)
    new_review_id: str = Field(default="", max_length=80)


class HeartbeatIn(Shape):
    """``heartbeat_review_session``: the lease the binding answered."""

    lease_id: str = Field(min_length=1, max_length=40)


class CompleteIn(Shape):
    """``complete_review_session``: the head the session reviewed."""

    reviewed_head: FullSha
    lease_id: str = Field(default="", max_length=40)


class DiffRange(Shape):
    """The diff range a review session covers."""

    base: str
    head: str


class ReviewSessionBinding(Shape):
    """The reviewer session a review lineage is bound to, and the diff range it reviews."""

    review_id: str
    session_id: str
    mode: Mode
    range: DiffRange
    fresh_session: bool
    selection: SelectionIn
    busy: bool
    # While busy: the lease its reviewer renews (heartbeat), and when it lapses.
    lease_id: str | None = None
    lease_expires_at: datetime | None = None


# --- dispatch budget: attempt journals (spec 002) ---------------------------------------------------


class JournalPage(Shape):
    """``read_journal_events`` as JSON.

    The records in offset order (the JSON-lines answer is the byte-faithful one), and the offset the
    next page reads after while more follow.
    """

    events: list[dict[str, JsonValue]]
    next_after: int | None = None
    # The offsets among ``events`` whose stored line is the service's canonical JSON (keys sorted), not
    # the bytes appended: records journaled before lines were kept, and bare events the service composed.
    reencoded: list[int] = []


class JournalIn(Shape):
    """``append_journal_events`` as JSON (JSON lines are accepted as well)."""

    events: list[Annotated[dict[str, Any], Storable]] = Field(max_length=500)


class JournalAppendResult(Shape):
    """What a journal append stored."""

    appended: int
    skipped_ephemeral: int
    last_offset: int
    already_journaled: int = 0


class EvidenceStatus(Shape):
    """A run's journal evidence marker (spec 002's tri-state) and why it was rejected, if it was."""

    run_id: str
    evidence: str
    offset: int | None = None
    schema_version: str | None = None
    evidence_rejected: dict[str, JsonValue] | None = None


# --- dispatch budget: the review-run gate (spec 001) ------------------------------------------------


class DigestIn(Shape):
    """The bounded digest's inputs; tool output is never accepted here."""

    last_human_message: str = Field(default="", max_length=100_000)
    last_assistant_message: str = Field(default="", max_length=100_000)
    loaded_skills: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=50)


class TurnIn(Shape):
    """``record_turn``: one finished turn of a session.

    The session gate's values are strict (issue 34): ``"1"`` is not a count, nor ``1`` a boolean.
    """

    origin: str = Field(default="", max_length=40)
    depth: Annotated[int, JsonInteger] = Field(default=0, ge=0, le=100)
    status: Literal["completed", "aborted", "failed"]
    tool_calls: Annotated[int, JsonInteger] = Field(default=0, ge=0, le=100_000)
    digest: DigestIn = Field(default_factory=DigestIn)


class ReviewIn(Shape):
    """``review_now``: ask the gate for a review now."""

    now: bool = Field(default=False, strict=True)
    digest: DigestIn = Field(default_factory=DigestIn)


class EnabledIn(Shape):
    """``set_review_enabled``: switch the session's gate on or off."""

    enabled: bool = Field(strict=True)


class FinishIn(Shape):
    """``finish_review``: how the session's review ended."""

    succeeded: bool = Field(strict=True)
    # The admission receipt of the review that finished: a late finish of a timed-out review is a no-op.
    receipt_id: str = Field(default="", max_length=40)


class GateDecision(Shape):
    """One decision of the gate's log (the gates.jsonl record, with snake_case keys)."""

    at: datetime
    session: str
    turn: int
    decision: str
    source: str
    reason: str
    choice: str | None = None
    confidence: float | None = None
    probability: float | None = None
    tool_calls: int
    latency_ms: int
    threshold: float


class GateDecisionList(Shape):
    """``list_gate_decisions``: a page of the decision log."""

    decisions: list[GateDecision]
    next_cursor: str | None = None


class SessionCounters(Shape):
    """A session's turn counters (spec 001)."""

    turns: int
    tools: int
    turn_index: int
    reviews: int
    in_flight: bool
    enabled: bool


class GateConfigIn(Shape):
    """``set_gate_config``: a project's gate settings; unset ones keep the deployment default."""

    enabled: bool | None = None
    gate: Literal["counters", "classifier"] | None = None
    turn_interval: int | None = Field(default=None, ge=0, le=1_000_000)
    tool_call_threshold: int | None = Field(default=None, ge=0, le=1_000_000)
    max_per_session: int | None = Field(default=None, ge=0, le=1_000_000)
    cooldown_minutes: int | None = Field(default=None, ge=0, le=1_000_000)
    gate_cooldown_minutes: int | None = Field(default=None, ge=0, le=1_000_000)
    timeout_minutes: int | None = Field(default=None, ge=0, le=1_000_000)
    confident_no: float | None = Field(default=None, ge=0, le=1)
    gate_timeout_ms: int | None = Field(default=None, ge=0, le=1_000_000)
    # One of the operator's classifier endpoints, by name (``default``: REVIEWLOOP_REVIEW_GATE_URL; others
    # from REVIEWLOOP_REVIEW_GATE_ENDPOINTS). The endpoint and its key are the deployment's.
    classifier_endpoint: str | None = Field(default=None, max_length=80)
    # Refused, with the endpoint names to pick from: a project never names the URL the deployment's
    # classifier key is sent to.
    classifier_url: str | None = Field(default=None, max_length=500)


class GateConfigOut(Shape):
    """A project's gate settings: what an admin set, and what is in force."""

    overrides: dict[str, JsonValue]
    effective: dict[str, JsonValue]


class TurnResult(Shape):
    """A session's counters after a turn, and the gate's decision when a review came due."""

    counters: SessionCounters
    counted: bool
    decision: GateDecision | None = None
    not_due_reason: str | None = None


# --- the shared-pool auto-send governor (issue 35) ------------------------------------------------------


class SendPool(Shape):
    """One sending pool (a From domain, shared by every org sending from it) today (UTC)."""

    pool: str
    day: str = Field(description="the UTC day the counter is for (YYYY-MM-DD)")
    used: int = Field(description="auto-sends and direct releases holding a unit")
    budget_per_day: int
    remaining: int
    refunded: int = Field(description="receipts given back: the send never happened")
    kept: int = Field(description="receipts kept for good: the outcome past DATA is unknown")


class SendPoolList(Shape):
    """The deployment's sending pools and the default budget of a pool the operator named none for."""

    default_budget_per_day: int
    pools: list[SendPool]
