"""Every JSON shape of the contract, declared once (spec 000, "The five canonical shapes" and more).

Each gateway route reads its body as one of these and answers with one as ``response_model=``.

One module per plane (``reviews``, ``events``, ``rules``, ``budget``, ``operations``, on the value types
of ``_base``); this package re-exports every shape, so callers import from ``reviewloop.shapes``.

Each model is an OpenAPI component schema of the same name, registered even before a route answers with it
(``SHAPES``), so ``/openapi.yaml`` always carries the whole surface that ``CONTRACT_MANIFEST`` names. Shapes
are exact (``extra="forbid"``): the drift tests validate the spec's canonical examples against them, so a
renamed field anywhere breaks the build. Readers that must tolerate additive 0.x changes (the typed client)
validate with ``extra="ignore"``. Declaring a pydantic model anywhere else is refused by ruff (TID251), and
``tests/contract/test_shapes.py`` fails when a route reads or answers a schema that is not one of these.

Request bodies keep the component names they were published under (``SendIn``, ``RunIn``, ...): a generated
client names its types after them. Where one JSON shape is both read and answered (a review selection, a
runner, an intent), one model serves both.

They live in the library (not the gateway) because the typed client (``reviewloop.client``) reads them too.
Gateway routes answer with ``response_model_exclude_unset=True``, so an optional field the route did not set
is absent rather than ``null`` (spec: an empty value would lie).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pydantic import BaseModel

from reviewloop.shapes import _base, budget, events, operations, push, reviews, rules
from reviewloop.shapes._base import (
    INT32_MAX,
    INT64_MAX,
    MAX_BODY_TEXT,
    MAX_RULE_BODY,
    MAX_RULE_CHARS,
    ActorKindName,
    Address,
    Addresses,
    CategoryState,
    Hours,
    ReviewModeName,
    ReviewStateName,
    SendPath,
    Sha,
    Shape,
)
from reviewloop.shapes.budget import (
    AdmissionReceipt,
    AdmissionResult,
    AdmitIn,
    AttemptKindName,
    BindIn,
    CompleteIn,
    DiffRange,
    DigestIn,
    EnabledIn,
    EvidenceStatus,
    ExtendIn,
    ExtensionReceipt,
    FinishIn,
    GateConfigIn,
    GateConfigOut,
    GateDecision,
    GateDecisionList,
    HeartbeatIn,
    JournalAppendResult,
    JournalIn,
    LaunchRefusal,
    LaunchTriggerName,
    Mode,
    ModeIn,
    ReadyGate,
    RequestOrigin,
    ResolvedReviewMode,
    ReviewConfig,
    ReviewConfigIn,
    ReviewIn,
    ReviewRun,
    ReviewSessionBinding,
    RoundBudget,
    RunIn,
    RunnerIn,
    RunnerList,
    RunStatusName,
    SelectionIn,
    SequenceIn,
    SequenceValidation,
    SessionCounters,
    SettleIn,
    Settlement,
    SettlementResult,
    TurnIn,
    TurnResult,
)
from reviewloop.shapes.events import (
    AckReviewEventEntry,
    AckReviewEventRequest,
    AckReviewEventResult,
    ReviewEvent,
    ReviewEventCursor,
    ReviewEventsResult,
)
from reviewloop.shapes.operations import (
    ApiKeyIn,
    ApiKeyOut,
    ContractManifest,
    DeadLetter,
    DeadLetterList,
    DiscardIn,
    Health,
    Problem,
    ProblemError,
    ProjectIn,
    ProjectOut,
    RevokedOut,
)
from reviewloop.shapes.push import (
    RotateWebhookSecretIn,
    Webhook,
    WebhookDeleted,
    WebhookDelivery,
    WebhookDeliveryList,
    WebhookIn,
    WebhookList,
    WebhookSecret,
)
from reviewloop.shapes.reviews import (
    AddressIn,
    Attachment,
    AttachmentIn,
    CancelIn,
    Contact,
    ContactList,
    DeliveryResolutionIn,
    DiffHunk,
    DiffJson,
    ForwardIn,
    InboundIn,
    InboundMessage,
    NewRule,
    OpenIn,
    PolicyIn,
    PostReviewChatRequest,
    ReplyIn,
    RestampReviewRequest,
    Review,
    ReviewChatResult,
    ReviewDecisionContext,
    ReviewDelivery,
    ReviewerDecisionRequest,
    ReviewerDecisionResult,
    ReviewerDecisionReview,
    ReviewFeedback,
    ReviewFeedbackComment,
    ReviewIntent,
    ReviewList,
    ReviewPolicy,
    ReviewTurn,
    ReviewTurnList,
    SendIn,
    SentMessage,
    SubmitForReviewResult,
    SubmitRevisionRequest,
)
from reviewloop.shapes.rules import (
    RISK_DIAL_FIELDS,
    AdminCategoryIn,
    Category,
    CategoryAudit,
    CategoryAuditEntry,
    CategoryDialIn,
    CategoryList,
    CategoryMerge,
    CategoryPacingState,
    CategoryRiskDial,
    CompositionKey,
    DialValues,
    GraduateIn,
    GraduationProposal,
    GraduationProposalList,
    GraduationStatus,
    HouseRuleIn,
    LearnReviewRuleRequest,
    MergeCategoriesRequest,
    PacingItem,
    PacingSettings,
    PacingSettingsIn,
    PacingValues,
    PromoteRuleRequest,
    ProposeCategoryRequest,
    ProposeGraduationRequest,
    RejectProposalIn,
    RevIn,
    RiskDial,
    RiskDialIn,
    RiskValues,
    Rule,
    RuleAudit,
    RuleAuditEntry,
    RuleHistory,
    RuleRevision,
    RuleSettings,
    RuleSettingsIn,
    RuleSnapshot,
    SaveRuleRequest,
    ScanBacklogStatus,
    UpdateCategoryRequest,
)

# The names before issue 15 (the SDK's type names replaced them), for code written against them.
ReviewChatRequest = PostReviewChatRequest
SubmitResult = SubmitForReviewResult
ReviewEventList = ReviewEventsResult
RuleList = RuleSnapshot
ReviewComment = ReviewFeedbackComment
AckReviewEventsRequest = AckReviewEventRequest
AckReviewEventsResult = AckReviewEventResult
ReviewEventAck = AckReviewEventEntry
RevisionIn = SubmitRevisionRequest
RestampIn = RestampReviewRequest
CategoryIn = ProposeCategoryRequest
CategoryPatch = UpdateCategoryRequest
RuleIn = SaveRuleRequest
ProposalIn = ProposeGraduationRequest


def _declared(module: ModuleType) -> tuple[type[BaseModel], ...]:
    # The public models a plane's module declares, in declaration order (not its imports, not pydantic's
    # parametrized generics such as "RootModel[dict[str, Any]]", not private bases).
    return tuple(
        value
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, BaseModel)
        and value.__module__ == module.__name__
        and value is not Shape
        and name.isidentifier()
        and not name.startswith("_")
    )


# Every shape, in the order the planes declare them.
SHAPES: tuple[type[BaseModel], ...] = tuple(
    model
    for module in (_base, reviews, events, rules, budget, operations, push)
    for model in _declared(module)
)


def component_schemas() -> dict[str, Any]:
    """Every shape as an OpenAPI 3.1 component schema, keyed by its model name."""
    from pydantic.json_schema import models_json_schema

    _, document = models_json_schema(
        [(model, "serialization") for model in SHAPES], ref_template="#/components/schemas/{model}"
    )
    schemas: dict[str, Any] = document.get("$defs", {})
    return schemas


__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "MAX_BODY_TEXT",
    "MAX_RULE_BODY",
    "MAX_RULE_CHARS",
    "RISK_DIAL_FIELDS",
    "SHAPES",
    "AckReviewEventEntry",
    "AckReviewEventRequest",
    "AckReviewEventResult",
    "ActorKindName",
    "Address",
    "AddressIn",
    "Addresses",
    "AdminCategoryIn",
    "AdmissionReceipt",
    "AdmissionResult",
    "AdmitIn",
    "ApiKeyIn",
    "ApiKeyOut",
    "Attachment",
    "AttachmentIn",
    "AttemptKindName",
    "BindIn",
    "CancelIn",
    "Category",
    "CategoryAudit",
    "CategoryAuditEntry",
    "CategoryDialIn",
    "CategoryList",
    "CategoryMerge",
    "CategoryPacingState",
    "CategoryRiskDial",
    "CategoryState",
    "CompleteIn",
    "CompositionKey",
    "Contact",
    "ContactList",
    "ContractManifest",
    "DeadLetter",
    "DeadLetterList",
    "DeliveryResolutionIn",
    "DialValues",
    "DiffHunk",
    "DiffJson",
    "DiffRange",
    "DigestIn",
    "DiscardIn",
    "EnabledIn",
    "EvidenceStatus",
    "ExtendIn",
    "ExtensionReceipt",
    "FinishIn",
    "ForwardIn",
    "GateConfigIn",
    "GateConfigOut",
    "GateDecision",
    "GateDecisionList",
    "GraduateIn",
    "GraduationProposal",
    "GraduationProposalList",
    "GraduationStatus",
    "Health",
    "HeartbeatIn",
    "Hours",
    "HouseRuleIn",
    "InboundIn",
    "InboundMessage",
    "JournalAppendResult",
    "JournalIn",
    "LaunchRefusal",
    "LaunchTriggerName",
    "LearnReviewRuleRequest",
    "MergeCategoriesRequest",
    "Mode",
    "ModeIn",
    "NewRule",
    "OpenIn",
    "PacingItem",
    "PacingSettings",
    "PacingSettingsIn",
    "PacingValues",
    "PolicyIn",
    "PostReviewChatRequest",
    "Problem",
    "ProblemError",
    "ProjectIn",
    "ProjectOut",
    "PromoteRuleRequest",
    "ProposeCategoryRequest",
    "ProposeGraduationRequest",
    "ReadyGate",
    "RejectProposalIn",
    "ReplyIn",
    "RequestOrigin",
    "ResolvedReviewMode",
    "RestampReviewRequest",
    "RevIn",
    "Review",
    "ReviewChatResult",
    "ReviewConfig",
    "ReviewConfigIn",
    "ReviewDecisionContext",
    "ReviewDelivery",
    "ReviewEvent",
    "ReviewEventCursor",
    "ReviewEventsResult",
    "ReviewFeedback",
    "ReviewFeedbackComment",
    "ReviewIn",
    "ReviewIntent",
    "ReviewList",
    "ReviewModeName",
    "ReviewPolicy",
    "ReviewRun",
    "ReviewSessionBinding",
    "ReviewStateName",
    "ReviewTurn",
    "ReviewTurnList",
    "ReviewerDecisionRequest",
    "ReviewerDecisionResult",
    "ReviewerDecisionReview",
    "RevokedOut",
    "RiskDial",
    "RiskDialIn",
    "RiskValues",
    "RotateWebhookSecretIn",
    "RoundBudget",
    "Rule",
    "RuleAudit",
    "RuleAuditEntry",
    "RuleHistory",
    "RuleRevision",
    "RuleSettings",
    "RuleSettingsIn",
    "RuleSnapshot",
    "RunIn",
    "RunStatusName",
    "RunnerIn",
    "RunnerList",
    "SaveRuleRequest",
    "ScanBacklogStatus",
    "SelectionIn",
    "SendIn",
    "SendPath",
    "SentMessage",
    "SequenceIn",
    "SequenceValidation",
    "SessionCounters",
    "SettleIn",
    "Settlement",
    "SettlementResult",
    "Sha",
    "Shape",
    "SubmitForReviewResult",
    "SubmitRevisionRequest",
    "TurnIn",
    "TurnResult",
    "UpdateCategoryRequest",
    "Webhook",
    "WebhookDeleted",
    "WebhookDelivery",
    "WebhookDeliveryList",
    "WebhookIn",
    "WebhookList",
    "WebhookSecret",
    "component_schemas",
]
