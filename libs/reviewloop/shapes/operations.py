"""The console's projects and API keys, problems, the contract manifest and health."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    Field,
    JsonValue,
)

from reviewloop.errors import Code
from reviewloop.shapes._base import PlainText, Shape
from reviewloop.tenancy import ActorKind

# --- the console: projects and API keys -------------------------------------------------------------


class ProjectIn(Shape):
    """``create_project``: in a new org, or in ``org_id``."""

    name: Annotated[str, PlainText] = Field(min_length=1, max_length=200)
    org_id: Annotated[str, PlainText] | None = Field(default=None, max_length=40)


class ProjectOut(Shape):
    """A created project."""

    org_id: str
    project_id: str
    name: str


# One address, as a mail relay takes it (no display name).
EMAIL = r"^[^@\s<>,;\x00]{1,64}@[^@\s<>,;\x00]+\.[^@\s<>,;\x00]+$"


class ApiKeyIn(Shape):
    """``issue_api_key``: a key for a project and an actor kind."""

    project_id: Annotated[str, PlainText] = Field(min_length=1, max_length=40)
    actor_kind: ActorKind
    name: Annotated[str, PlainText] = Field(default="", max_length=200)
    email: str | None = Field(
        default=None,
        max_length=320,
        pattern=EMAIL,
        description="where the key's person is told (by mail) of a draft escalated to them or their role",
    )


class ApiKeyOut(Shape):
    """An issued key; the secret is shown once."""

    key_id: str
    api_key: str | None = Field(
        description=(
            "The secret, shown once: only its hash is stored, so a replay of the issuing request under "
            "its Idempotency-Key answers null (and a `note`); revoke the key and issue another if it was lost."
        )
    )
    actor_kind: ActorKind
    org_id: str
    project_id: str
    agent_id: str | None = None
    note: str | None = Field(default=None, description="Set on a replay, whose `api_key` is null.")


class RevokedOut(Shape):
    """A revoked key."""

    key_id: str
    revoked: bool


# --- the console: dead letters -------------------------------------------------------------------------


class DeadLetter(Shape):
    """An event a receiver refused for good, set aside until an admin retries or discards it."""

    event_id: str
    source: str = Field(description="the service whose outbox holds it")
    destination: str = Field(description="the service that refused it")
    aggregate_id: str = Field(description="what the event is about: a review (rr_...), a rule, a category")
    type: str
    occurred_at: datetime
    dead_at: datetime
    reason: str = Field(description="the receiver's refusal: gRPC status and detail")
    attempts: int


class DeadLetterList(Shape):
    """A project's dead letters across every service, newest first."""

    dead_letters: list[DeadLetter]


class DiscardIn(Shape):
    """``discard_dead_letter``: why the event will never be delivered."""

    reason: Annotated[str, PlainText] = Field(min_length=1, max_length=500)


# --- operations -------------------------------------------------------------------------------------


class ProblemError(Shape):
    """One bad field or recovery fact (the SDK's ``ProblemField``).

    A bad field: ``field`` is a JSON pointer, ``code`` the problem's code, ``detail`` what is wrong. A
    recovery fact: ``field`` names it; ``state``, ``revision``, ``version``, ``allowed_action`` (repeated)
    and ``sent_message_id`` carry their value in ``code`` (and ``detail``), the others (``policy``,
    ``retry_with``, ``recipient``, ...) in ``detail`` under the problem's code. Every value is a string.
    """

    field: str | None = None
    code: str | None = None
    detail: str | None = None


class Problem(Shape):
    """RFC 9457 problem details: branch on ``code``, never on ``status`` alone."""

    type: str
    title: str
    status: int
    detail: str
    code: Code
    errors: list[ProblemError] | None = None
    request_id: str | None = None
    next_action: str | None = Field(
        default=None,
        description=(
            "what to do next, where the code has one recovery: reread_and_retry | get_rules_and_redraft | "
            "use_an_allowed_action | stop | wait_for_reconciliation | add_intent_and_resubmit | "
            "reread_thread_and_recompose | use_a_new_idempotency_key | retry_after"
        ),
    )
    current_state: dict[str, JsonValue] | None = Field(
        default=None,
        description="the review as it now is: state, revision, version, allowed_actions, sent_message_id",
    )
    unsent_text: str | None = Field(
        default=None, description="a refused send's text, handed back: nothing was sent and nothing queued"
    )


class ContractManifest(Shape):
    """The machine-readable contract a harness pins against."""

    name: str
    version: str
    stability: Literal["provisional"]
    kind: Literal["sdk+skill-contract"]
    spec_ref: str
    core_shapes: list[str]
    shapes: list[str]
    skills: list[str]
    review_problem_retryable: dict[str, bool] = Field(
        description="every problem code: worth repeating after its re-read (the SDK's REVIEW_PROBLEM_RETRYABLE)"
    )
    review_problem_retry_limits: dict[str, int] = Field(
        description="at most how many repeats: stale 3, born_stale 1 (once per rule high-water)"
    )


class Health(Shape):
    """``ok`` when every backend reports SERVING (200); ``degraded`` names the ones that do not (503)."""

    status: Literal["ok", "degraded"]
    backends: dict[str, str]
