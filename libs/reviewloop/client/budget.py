"""The reviewer plane's dispatch budget: the review runs a code-review orchestrator records (spec 003)."""

from __future__ import annotations

from typing import Any

from reviewloop.client.call import Call, drop_none, quoted, shaped, verb
from reviewloop.shapes import ReviewRun


class BudgetVerbs:
    """The review rounds' runs."""

    @verb
    @staticmethod
    def record_review_run(
        run_id: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> Call[ReviewRun]:
        """Record a review run, or change its status (``PUT /v1/review-rounds/runs/{run_id}``).

        Args:
            run_id: The run's id.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **fields: ``repository``, ``pr_number``, ``head_sha``, ``status`` (``active``, ``archived``,
                ``published``, ``failed``), the review-mode rungs and ``review_sequence``; an omitted
                field keeps what the run has.

        Returns:
            The :class:`ReviewRun`, with ``created_by``: the principal that created it (its owner).

        Raises:
            ReviewloopError: ``403 forbidden_scope`` for a status change by a key that may not make it.
        """
        return Call(
            "PUT", f"/v1/review-rounds/runs/{quoted(run_id)}", shaped(ReviewRun), body=drop_none(fields),
            idempotency_key=idempotency_key,
        )  # fmt: skip
