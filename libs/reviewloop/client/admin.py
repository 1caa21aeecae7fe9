"""The console's authority, for an admin key.

Graduation proposals, parked deliveries, dead letters, and the project's blocked and suppressed recipients.
"""

from __future__ import annotations

from reviewloop.client.call import Call, quoted, shaped, verb
from reviewloop.shapes import Contact, ContactList, DeadLetter, DeadLetterList, GraduationProposal, Review


class AdminVerbs:
    """The verbs of an admin key (``/v1/admin/...``)."""

    @verb
    @staticmethod
    def reject_graduation_proposal(
        project_id: str, proposal_id: str, *, reason: str, idempotency_key: str | None = None
    ) -> Call[GraduationProposal]:
        """Reject a graduation proposal with a reason; the category stays on its rung.

        ``POST /v1/admin/projects/{project_id}/graduation-proposals/{proposal_id}/reject``; takes an admin
        key. The proposing agent reads ``reason`` verbatim (:meth:`list_graduation_proposals_of_category`). To approve
        a proposal instead, graduate its category to the proposal's ``to_state``.

        Args:
            project_id: The proposal's ``prj_`` project.
            proposal_id: The ``gprop_`` id.
            reason: Why, for the agent.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.

        Returns:
            The :class:`GraduationProposal`, now ``rejected``.

        Raises:
            ReviewloopError: ``409 wrong_state`` for a proposal already decided or moot; ``403`` for a
                non-admin key.
        """
        return Call(
            "POST",
            f"/v1/admin/projects/{quoted(project_id)}/graduation-proposals/{quoted(proposal_id)}/reject",
            shaped(GraduationProposal), body={"reason": reason}, idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def resolve_delivery(
        project_id: str, review_id: str, *, outcome: str, reason: str, idempotency_key: str | None = None
    ) -> Call[Review]:
        """Close a parked delivery by evidence: an operator's "mark delivered" / "mark failed".

        ``POST /v1/admin/projects/{project_id}/reviews/{review_id}/delivery-resolution``; takes an admin key.

        A delivery whose relay took the message but whose answer was lost is parked
        (``delivery.status == "send_needs_reconciliation"`` on :meth:`get_review`); the platform never
        resends it and no timer fails it. Only evidence closes it: the Sent folder over IMAP, or this verb.

        Args:
            project_id: The review's ``prj_`` project.
            review_id: The ``rr_`` id.
            outcome: ``delivered`` (the review becomes ``sent``) or ``failed`` (``failed``, with the reason
                as its ``send_error``).
            reason: The evidence, kept on the delivery as its ``resolution``.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.

        Returns:
            The :class:`Review`, now ``sent`` / ``auto_sent`` or ``failed``.

        Raises:
            ReviewloopError: ``409 wrong_state`` unless the delivery is parked; ``403`` for a non-admin key.
        """
        return Call(
            "POST",
            f"/v1/admin/projects/{quoted(project_id)}/reviews/{quoted(review_id)}/delivery-resolution",
            shaped(Review), body={"outcome": outcome, "reason": reason}, idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def list_dead_letters(project_id: str) -> Call[DeadLetterList]:
        """Read a project's dead letters (``GET /v1/admin/projects/{project_id}/dead-letters``); admin key.

        A dead letter is an event a receiver refused for good (a malformed body, a state it can never take):
        set aside so the events after it flow, until an admin retries or discards it.

        Returns:
            The :class:`DeadLetterList`, newest first across every service, each with the refusal's reason.
        """
        return Call("GET", f"/v1/admin/projects/{quoted(project_id)}/dead-letters", shaped(DeadLetterList))

    @verb
    @staticmethod
    def retry_dead_letter(
        project_id: str, event_id: str, *, idempotency_key: str | None = None
    ) -> Call[DeadLetter]:
        """Hand a dead letter back to its relay once its cause is fixed; admin key.

        ``POST /v1/admin/projects/{project_id}/dead-letters/{event_id}/retry``: delivered as if new, and
        taken once (receivers deduplicate events).

        Returns:
            The :class:`DeadLetter` as it was.

        Raises:
            ReviewloopError: ``404 not_found`` when the project holds no such dead letter (delivered,
                already retried or discarded).
        """
        return Call(
            "POST", f"/v1/admin/projects/{quoted(project_id)}/dead-letters/{quoted(event_id)}/retry",
            shaped(DeadLetter), body={}, idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def discard_dead_letter(
        project_id: str, event_id: str, *, reason: str, idempotency_key: str | None = None
    ) -> Call[DeadLetter]:
        """Give up on a dead letter, saying why; admin key. It is never delivered.

        ``POST /v1/admin/projects/{project_id}/dead-letters/{event_id}/discard``.

        Returns:
            The :class:`DeadLetter` as it was.

        Raises:
            ReviewloopError: ``404 not_found`` when the project holds no such dead letter.
        """
        return Call(
            "POST", f"/v1/admin/projects/{quoted(project_id)}/dead-letters/{quoted(event_id)}/discard",
            shaped(DeadLetter), body={"reason": reason}, idempotency_key=idempotency_key,
        )  # fmt: skip

    @verb
    @staticmethod
    def list_blocked_and_suppressed(project_id: str) -> Call[ContactList]:
        """The project's blocked and suppressed recipients (``GET /v1/admin/projects/{project_id}/contacts``).

        Takes an admin key. Each contact says since when and by whom each flag is set.

        Args:
            project_id: The ``prj_`` project.

        Returns:
            A :class:`ContactList`, by address.
        """
        return Call("GET", f"/v1/admin/projects/{quoted(project_id)}/contacts", shaped(ContactList))

    @verb
    @staticmethod
    def unblock_recipient(project_id: str, address: str) -> Call[Contact]:
        """Take a recipient off the project's block list (``DELETE .../blocks/{address}``); admin key.

        Args:
            project_id: The ``prj_`` project.
            address: The blocked address.

        Returns:
            The :class:`Contact` with ``blocked`` false.

        Raises:
            ReviewloopError: ``404`` when the address is not blocked.
        """
        return Call(
            "DELETE", f"/v1/admin/projects/{quoted(project_id)}/blocks/{quoted(address)}", shaped(Contact)
        )

    @verb
    @staticmethod
    def unsuppress_recipient(project_id: str, address: str) -> Call[Contact]:
        """Take a recipient off the project's suppression list (``DELETE .../suppressions/{address}``).

        Takes an admin key.

        Args:
            project_id: The ``prj_`` project.
            address: The suppressed address.

        Returns:
            The :class:`Contact` with ``suppressed`` false.

        Raises:
            ReviewloopError: ``404`` when the address is not suppressed.
        """
        return Call(
            "DELETE",
            f"/v1/admin/projects/{quoted(project_id)}/suppressions/{quoted(address)}",
            shaped(Contact),
        )
