"""The agent plane's rules: the effective stack to compose with, and the project layer an agent writes."""

from __future__ import annotations

from typing import Any

from reviewloop.client.call import Call, drop_none, quoted, shaped, verb
from reviewloop.shapes import Rule, RuleAudit, RuleSnapshot


class RuleVerbs:
    """Reading the rule stack and writing the project's rules."""

    @verb
    @staticmethod
    def get_rules(*, scope: str | None = None, category_id: str | None = None) -> Call[RuleSnapshot]:
        """Read the effective rule stack, precedence ladder applied (``GET /v1/rules``).

        Compose with the whole stack: unfiltered, the answer also carries the rule versions, the rule
        high-water and a short-lived ``composition_token`` to pass with the draft. A filtered query is for
        browsing and carries no token.

        Args:
            scope: Only rules of this scope (``general`` or ``category``).
            category_id: Only rules that apply to this category.

        Returns:
            A :class:`RuleSnapshot`, with the ``composition_token`` when unfiltered.
        """
        return Call(
            "GET",
            "/v1/rules",
            shaped(RuleSnapshot),
            params=drop_none(dict(scope=scope, category_id=category_id)),
        )

    @verb
    @staticmethod
    def save_rule(
        *,
        rule_text: str,
        scope: str,
        category_id: str | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Call[Rule]:
        """Save a project-layer writing rule, or revise one (``POST /v1/rules``).

        An agent always writes the ``project`` layer; org-wide house style is authored from the console.

        Args:
            rule_text: The rule, as the composing agent should apply it.
            scope: ``general`` or ``category``.
            category_id: The category a ``category`` rule applies to.
            idempotency_key: Reuse it to retry the same request safely; a fresh key is generated when
                omitted.
            **fields: Further request fields: to revise, ``supersedes_id`` (the ``rule_`` id of the revision
                replaced, the SDK's way) or ``lineage_id`` and the ``expected_rev`` that was read; also ``kind``, ``priority``, ``source_review_id`` and ``source_turn_id`` (the turn
                of that review it was learnt from), ``scope_agent_id`` (a per-agent rule),
                ``propagate_to_pending`` (default true: the pending drafts the rule leaves stale are nudged
                a look-ahead window at a time) and ``suggested_batch`` (what each such nudge suggests; 0:
                the window) ...

        Returns:
            The saved :class:`Rule` (``201``).

        Raises:
            ReviewloopError: ``409 stale`` when ``expected_rev`` is no longer the lineage's current
                revision (re-read, re-apply, save again); ``409 conflict`` when a rule in the same
                scope already says this; ``bad_request`` for a ``category`` rule without its
                category, or a ``general`` one with one.
        """
        body = drop_none(dict(rule_text=rule_text, scope=scope, category_id=category_id, **fields))
        return Call("POST", "/v1/rules", shaped(Rule), body=body, idempotency_key=idempotency_key)

    @verb
    @staticmethod
    def learn_review_rule(
        review_id: str, *, rule_text: str, idempotency_key: str | None = None, **fields: Any
    ) -> Call[Rule]:
        """Save a project rule learnt from a review's diff and comments (``POST /v1/reviews/{id}/rules``).

        Args:
            review_id: The ``rr_`` id the rule was learnt from (its ``source_review_id``).
            rule_text: The rule.
            idempotency_key: Reuse it to retry safely; a fresh key is generated when omitted.
            **fields: ``turn_id`` (one of the review's turns), ``scope`` (default: the review's
                category, else general), ``category_id``, ``kind``.

        Returns:
            The saved :class:`Rule` (``201``).

        Raises:
            ReviewloopError: ``404`` for a review outside the caller's project; ``bad_request`` for a
                turn of another review (422); as :meth:`save_rule` otherwise.
        """
        body = drop_none(dict(rule_text=rule_text, **fields))
        return Call(
            "POST",
            f"/v1/reviews/{quoted(review_id)}/rules",
            shaped(Rule),
            body=body,
            idempotency_key=idempotency_key,
        )

    @verb
    @staticmethod
    def get_rule_audit(lineage_id: str) -> Call[RuleAudit]:
        """Read the changes of a rule lineage, oldest first (``GET /v1/rules/{lineage_id}/audit``).

        Args:
            lineage_id: The ``rln_`` id.

        Returns:
            A :class:`RuleAudit`: each change (``create``, ``supersede``, ``retire``, ``restore``, ...), who
            made it, the rule before and after, and whether an undo took it back.

        Raises:
            ReviewloopError: ``404 not_found`` for a lineage the caller's project cannot see.
        """
        return Call("GET", f"/v1/rules/{quoted(lineage_id)}/audit", shaped(RuleAudit))

    @verb
    @staticmethod
    def retire_rule(lineage_id: str, *, rev: int, idempotency_key: str | None = None) -> Call[Rule]:
        """Retire a project rule (``POST /v1/rules/{lineage_id}/retire``).

        Args:
            lineage_id: The ``rln_`` id.
            rev: The lineage's current rev, as read (read-before-write).
            idempotency_key: Reuse it to retry safely; a fresh key is generated when omitted.

        Returns:
            The new, ``retired`` revision as a :class:`Rule`.

        Raises:
            ReviewloopError: ``409 stale`` when ``rev`` is no longer current; ``403 forbidden_scope`` for
                org house style or under staged approval (the console's); ``404`` for another project's.
        """
        return Call(
            "POST",
            f"/v1/rules/{quoted(lineage_id)}/retire",
            shaped(Rule),
            body={"rev": rev},
            idempotency_key=idempotency_key,
        )

    @verb
    @staticmethod
    def promote_rule(
        lineage_id: str, *, rev: int, to_layer: str | None = None, idempotency_key: str | None = None
    ) -> Call[Rule]:
        """Promote a rule (``POST /v1/rules/{lineage_id}/promote``).

        An active category rule becomes general; with ``to_layer="org"`` an active project rule becomes
        org house style (an admin key).

        Returns:
            The new revision as a :class:`Rule`: ``general``, and for ``org`` with ``rule_layer: org``.

        Raises:
            ReviewloopError: ``409 wrong_state`` unless the rule can be promoted so; ``403
                forbidden_scope`` for house style without an admin key; otherwise as :meth:`retire_rule`.
        """
        return Call(
            "POST",
            f"/v1/rules/{quoted(lineage_id)}/promote",
            shaped(Rule),
            body=drop_none(dict(rev=rev, to_layer=to_layer)),
            idempotency_key=idempotency_key,
        )

    @verb
    @staticmethod
    def undo_rule_change(lineage_id: str, *, rev: int, idempotency_key: str | None = None) -> Call[Rule]:
        """Restore the rule's revision in force before its last change (``POST /v1/rules/{id}/undo``).

        Undoing a creation retires the rule.

        Args:
            lineage_id: The ``rln_`` id.
            rev: The lineage's current rev, as read.
            idempotency_key: Reuse it to retry safely; a fresh key is generated when omitted.

        Returns:
            The new revision as a :class:`Rule`.

        Raises:
            ReviewloopError: as :meth:`retire_rule`.
        """
        return Call(
            "POST",
            f"/v1/rules/{quoted(lineage_id)}/undo",
            shaped(Rule),
            body={"rev": rev},
            idempotency_key=idempotency_key,
        )
