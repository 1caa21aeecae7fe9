"""The agent plane's categories.

The registry a draft is matched against, a category's backlog and pacing, and the graduation ladder (an
agent proposes, a human decides).
"""

from __future__ import annotations

from typing import Any

from reviewloop.client.call import Call, drop_none, quoted, shaped, verb
from reviewloop.shapes import (
    Category,
    CategoryAudit,
    CategoryList,
    CategoryMerge,
    CategoryPacingState,
    GraduationProposalList,
    GraduationStatus,
    ScanBacklogStatus,
)


class CategoryVerbs:
    """The category registry, a category's queue, and its graduation."""

    @verb
    @staticmethod
    def list_categories(*, cursor: str | None = None) -> Call[CategoryList]:
        """List the category registry a draft is matched against (``GET /v1/categories``).

        The matching is the agent's: categories are keyed on the opaque ``cat_`` id, and their names are
        mutable display metadata.

        Args:
            cursor: The ``next_cursor`` of the previous page.

        Returns:
            A :class:`CategoryList`; its ``next_cursor`` is ``None`` on the last page.
        """
        return Call("GET", "/v1/categories", shaped(CategoryList), params=drop_none(dict(cursor=cursor)))

    @verb
    @staticmethod
    def create_category(
        *, name: str, description: str = "", idempotency_key: str | None = None, **fields: Any
    ) -> Call[Category]:
        """Add a category to the registry (``POST /v1/categories``), authored by the agent.

        Args:
            name: The display name.
            description: What kind of message belongs in it, for matching.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **fields: Further request fields (``scope``: ``org_shared``, the default, or ``project``).

        Returns:
            The created :class:`Category` (``201``), starting ``supervised``.

        Raises:
            ReviewloopError: ``409 conflict`` when a category already has that name (its id is in
                the hints: use it rather than a twin); ``bad_request`` for an unknown scope.
        """
        body = drop_none(dict(name=name, description=description, **fields))
        return Call("POST", "/v1/categories", shaped(Category), body=body, idempotency_key=idempotency_key)

    @verb
    @staticmethod
    def update_category(
        category_id: str, *, name: str | None = None, description: str | None = None
    ) -> Call[Category]:
        """Rename or redescribe a category (``PATCH /v1/categories/{category_id}``).

        An omitted field is untouched; the id never changes.

        Returns:
            The updated :class:`Category`.

        Raises:
            ReviewloopError: ``409 conflict`` when another category has that name (its id is in the
                hints); ``404`` for a category the caller's project cannot see.
        """
        body = drop_none(dict(name=name, description=description))
        return Call("PATCH", f"/v1/categories/{quoted(category_id)}", shaped(Category), body=body)

    @verb
    @staticmethod
    def merge_categories(
        category_id: str, *, into_category_id: str, rationale: str, idempotency_key: str | None = None
    ) -> Call[CategoryMerge]:
        """Merge a category into another (``POST /v1/categories/{category_id}/merge``).

        Its live rules and pending drafts move to ``into_category_id`` (each draft's agent gets a
        ``recheck_category`` nudge, reason ``merged``) and it is retired (``merged_into``).

        Args:
            category_id: The ``cat_`` id merged away.
            into_category_id: The ``cat_`` id that stays.
            rationale: Why both describe the same purpose.
            idempotency_key: Reuse it to retry safely; a fresh key is generated when omitted.

        Returns:
            A :class:`CategoryMerge`: both categories as they now are, how many rules moved, and the
            merge's audit entry (with the rationale).

        Raises:
            ReviewloopError: ``403 forbidden_scope`` for an agent's merge outside the catalog's limits (both
                agent-authored, shared, supervised, under 24 hours old, governed alike, used by its project
                alone; the limit is the ``reason`` hint); ``409 conflict`` when either was merged elsewhere (``merged_into``
                in the hints); ``404`` for a category the caller's project cannot see.
        """
        body = {"into_category_id": into_category_id, "rationale": rationale}
        return Call(
            "POST",
            f"/v1/categories/{quoted(category_id)}/merge",
            shaped(CategoryMerge),
            body=body,
            idempotency_key=idempotency_key,
        )

    @verb
    @staticmethod
    def get_category_audit(category_id: str) -> Call[CategoryAudit]:
        """The merges a category took part in, either side (``GET /v1/categories/{category_id}/audit``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            A :class:`CategoryAudit`: each merge's who, when, from, into, rationale and rules moved, oldest
            first.

        Raises:
            ReviewloopError: ``404`` for a category the caller's project cannot see.
        """
        return Call("GET", f"/v1/categories/{quoted(category_id)}/audit", shaped(CategoryAudit))

    @verb
    @staticmethod
    def get_category(category_id: str) -> Call[Category]:
        """Read one category (``GET /v1/categories/{category_id}``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            The :class:`Category`.

        Raises:
            ReviewloopError: ``404 not_found`` for a category the caller's project cannot see.
        """
        return Call("GET", f"/v1/categories/{quoted(category_id)}", shaped(Category))

    @verb
    @staticmethod
    def get_backlog_status(category_id: str) -> Call[ScanBacklogStatus]:
        """Count a category's queued drafts, current or stale against its rules (``GET .../backlog``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            The :class:`ScanBacklogStatus`: ``queued``, ``current_enough`` and ``stale`` (composed under an
            older rule high-water: redraft them a few at a time, or restamp the ones that need no change).

        Raises:
            ReviewloopError: ``404 not_found`` for a category the caller's project cannot see.
        """
        return Call("GET", f"/v1/categories/{quoted(category_id)}/backlog", shaped(ScanBacklogStatus))

    @verb
    @staticmethod
    def get_pacing_state(category_id: str) -> Call[CategoryPacingState]:
        """How a category's stale drafts are being worked through (``GET .../pacing``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            The :class:`CategoryPacingState`: the project's pacing values, the review cursor (the draft a
            human last decided), and each queued draft fresh (``in_window_fresh``), nudged and awaiting its
            redraft or restamp (``in_window_redrafting``), waiting for a slot (``ahead``) or passed over by
            the human (``behind_cursor``), with ``next_review_ids`` in order.

        Raises:
            ReviewloopError: ``404 not_found`` for a category the caller's project cannot see.
        """
        return Call("GET", f"/v1/categories/{quoted(category_id)}/pacing", shaped(CategoryPacingState))

    @verb
    @staticmethod
    def get_graduation_status(category_id: str) -> Call[GraduationStatus]:
        """Read a category's progress toward its next rung (``GET /v1/categories/{category_id}/graduation``).

        Args:
            category_id: The ``cat_`` id.

        Returns:
            The :class:`GraduationStatus`: the next state, the maturity counters against their thresholds,
            and ``can_graduate``, whether a human's graduate would succeed now.

        Raises:
            ReviewloopError: ``404 not_found`` for a category outside the caller's project.
        """
        return Call("GET", f"/v1/categories/{quoted(category_id)}/graduation", shaped(GraduationStatus))

    @verb
    @staticmethod
    def propose_graduation(
        category_id: str,
        *,
        evidence: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Call[GraduationStatus]:
        """Propose graduating a category to its next rung (``POST .../{category_id}/graduation-proposals``).

        An agent only proposes; a human flips the bit. The proposal, and how a human decided it, are read
        with :meth:`list_graduation_proposals_of_category`.

        Args:
            category_id: The ``cat_`` id.
            evidence: Opaque structured evidence for the human (the SDK's), e.g. ``{"approvals": 20}``.
            idempotency_key: Reuse it to retry the same request safely (no second proposal); a fresh key is
                generated when omitted.
            **fields: ``to_state`` (default: the next rung) and a ``note`` for the human.

        Returns:
            The category's :class:`GraduationStatus` (``201``), as the SDK reads it.

        Raises:
            ReviewloopError: ``409 graduation_locked`` for a category marked ``never_graduate``;
                ``bad_request`` when ``to_state`` is not the category's next rung.
        """
        body = drop_none(dict(evidence=evidence, **fields))
        return Call(
            "POST",
            f"/v1/categories/{quoted(category_id)}/graduation-proposals",
            shaped(GraduationStatus),
            body=body,
        )

    @verb
    @staticmethod
    def list_graduation_proposals_of_category(category_id: str) -> Call[GraduationProposalList]:
        """The category's graduation proposals, newest first (``GET .../{category_id}/graduation-proposals``).

        How an agent learns what a human did with its proposal: ``status`` is ``proposed`` (waiting),
        ``approved`` (the category graduated to it) or ``rejected`` with the human's ``reason``, verbatim.

        Args:
            category_id: The ``cat_`` id.

        Returns:
            A :class:`GraduationProposalList`, decided proposals included.

        Raises:
            ReviewloopError: ``404`` for a category this key does not see.
        """
        return Call(
            "GET",
            f"/v1/categories/{quoted(category_id)}/graduation-proposals",
            shaped(GraduationProposalList),
        )
