"""The dispatch_budget routes, one module per spec section: ``rounds`` (spec 003: runs, admissions,
settlements, the round budget, extensions), ``journals`` (spec 002: attempt journals and their evidence),
``catalog`` (spec 003: runners, the review configuration, sequences, mode resolution, session lineage) and
``gate`` (spec 001: session turns, the review-run gate and its decision log)."""

from typing import Annotated

from fastapi import Depends
from reviewloop.tenancy import ActorKind, Principal

from gateway.auth import require

# The JSON-lines media types a journal append reads and the decision log answers.
JSONL = ("application/x-ndjson", "application/jsonl", "application/json-lines")

# Every project key, a service key (a code-review orchestrator) included; dispatch_budget decides
# which plane may use which verb (docs/budget.md).
Caller = Annotated[
    Principal,
    Depends(
        require(ActorKind.AGENT, ActorKind.HUMAN, ActorKind.REVIEW_AGENT, ActorKind.ADMIN, ActorKind.SERVICE)
    ),
]
