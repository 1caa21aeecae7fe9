"""Query-parameter models, apart from ``SHAPES``: FastAPI publishes each field as a route's parameter.

Not ``Shape``s: a query string's values are text, read as FastAPI reads a single parameter (``true`` as a
boolean, ``50`` as an integer), where a JSON body's must already be of their type.
"""

from __future__ import annotations

from typing import Annotated, get_args

from pydantic import BaseModel, Field, StringConstraints

from reviewloop.ids import id_pattern
from reviewloop.shapes._base import ReviewStateName

_STATE = "|".join(sorted(get_args(ReviewStateName), key=len, reverse=True))
# One state, or the SDK's comma-joined several (empty parts are skipped).
StateFilter = Annotated[str, StringConstraints(max_length=200, pattern=f"^,*(({_STATE})(,+({_STATE}))*)?,*$")]
# A page of reviews starts after the review its cursor names ("" the first page).
REVIEW_CURSOR = f"^({id_pattern('rr')})?$"
# "" is the default (no filter), so the published pattern takes it too.
ESCALATED_TO = f"^(|me|role:(human|admin)|{id_pattern('key')})$"


class ReviewListQuery(BaseModel):
    """``list_reviews``' query parameters; each "" or false filters nothing."""

    state: list[StateFilter] = []
    agent_id: str = Field(default="", max_length=40)
    composer: str = Field(
        default="",
        max_length=40,
        description="`me`: the caller's own drafts (the SDK's filter); else an agent id",
    )
    category_id: str = Field(default="", max_length=40)
    cursor: str = Field(default="", max_length=64, pattern=REVIEW_CURSOR)
    page_token: str = Field(
        default="",
        alias="page",
        max_length=64,
        pattern=REVIEW_CURSOR,
        description="the SDK's name for `cursor`",
    )
    limit: int = Field(default=50, ge=1, le=200)
    humans_notified: bool = False
    inbox: str = Field(default="", max_length=320, description="only the reviews sent from this inbox")
    thread_id: str = Field(default="", max_length=40, description="only the replies in this thread")
    escalated: bool = Field(default=False, description="only the drafts a reviewer escalated")
    escalated_to: str = Field(
        default="",
        max_length=40,
        pattern=ESCALATED_TO,
        description="only the drafts escalated to `me` (the caller's key or its role), a person's key id "
        "or `role:human` | `role:admin`",
    )
    overdue: bool = Field(default=False, description="only the escalated drafts past their deadline")
