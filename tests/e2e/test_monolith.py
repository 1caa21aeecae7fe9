"""The review lifecycle and the event stream against monolithic mode (``reviewloop up --target all``).

Every part in one process, the contexts calling each other through the in-process channel
(``reviewloop.inproc``), under the production overlay's trust (a service key: every in-process call is
signed and checked). The whole suite runs so with ``REVIEWLOOP_TEST_TARGET=all``; this module keeps a
representative set in every run, on one stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from stack.launcher import Stack

from tests.conftest import Databases, production_trust, start_stack
from tests.e2e.test_push_stream import (
    producer,
    test_a_projects_streams_share_one_read_and_each_sees_only_what_its_key_may,
    test_the_stream_resumes_after_a_dropped_connection_with_no_gap_and_no_repeat,
)
from tests.e2e.test_review_lifecycle import (
    test_a_human_opens_comments_and_approves_and_the_agent_learns_it_was_sent,
    test_a_human_reject_nudges_and_the_redraft_goes_back_to_the_queue,
    test_blocks_and_suppressions_refuse_at_submit_before_the_intent_gate,
    test_chat_is_idempotent_and_a_reused_key_with_another_body_conflicts,
    test_redraft_keeps_or_clears_attachments_and_wrong_state_names_the_legal_verbs,
    test_reply_and_forward_are_materialized_from_recorded_inbound_mail,
    test_the_policy_resolves_override_then_account_default_then_floor,
)

__all__ = [
    "producer",
    "test_a_human_opens_comments_and_approves_and_the_agent_learns_it_was_sent",
    "test_a_human_reject_nudges_and_the_redraft_goes_back_to_the_queue",
    "test_a_projects_streams_share_one_read_and_each_sees_only_what_its_key_may",
    "test_blocks_and_suppressions_refuse_at_submit_before_the_intent_gate",
    "test_chat_is_idempotent_and_a_reused_key_with_another_body_conflicts",
    "test_redraft_keeps_or_clears_attachments_and_wrong_state_names_the_legal_verbs",
    "test_reply_and_forward_are_materialized_from_recorded_inbound_mail",
    "test_the_policy_resolves_override_then_account_default_then_floor",
    "test_the_stream_resumes_after_a_dropped_connection_with_no_gap_and_no_repeat",
]


@pytest.fixture(scope="module")
async def stack(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """One monolith on SQLite for the module."""
    tmp = tmp_path_factory.mktemp("stack-monolith")
    running = await start_stack(databases, "sqlite", tmp, production_trust(tmp / "pki"), target="all")
    yield running
    running.stop_all()
