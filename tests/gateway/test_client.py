"""The typed client (async and sync) and the example agent, against a real stack."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from reviewloop.client import AsyncReviewloop, Reviewloop, ReviewloopError, Verbs, is_retryable
from reviewloop.contract import CONTRACT_VERSION
from stack.topology import GATEWAY

from tests.conftest import INTENT, Api

EXAMPLE = Path(__file__).parents[2] / "examples" / "agent_loop.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


async def keys(api: Api) -> tuple[str, str]:
    project = await api.project()
    agent = (await api.key(project["project_id"], "agent"))["api_key"]
    human = (await api.key(project["project_id"], "human"))["api_key"]
    return agent, human


def url(api: Api) -> str:
    return f"http://{api.stack.address(GATEWAY)}"


async def test_async_client_round_trip_and_typed_problems(api: Api) -> None:
    agent, _ = await keys(api)
    async with AsyncReviewloop(url(api), agent) as rl:
        sent = await rl.send_email(to=["vp@acme.com"], subject="Q3", body_text="Hi", intent=INTENT)
        assert sent.status == "queued_for_review" and sent.review_id.startswith("rr_")
        review = await rl.get_review(sent.review_id)
        assert (review.state, review.revision, review.intent and review.intent.summary) == (
            "needs_review",
            1,
            INTENT["summary"],
        )
        assert [r.id for r in (await rl.list_reviews(state=["needs_review"])).items] == [sent.review_id]
        cancelled = await rl.cancel_review(sent.review_id, parent_revision=1)
        assert cancelled.closed
        with pytest.raises(ReviewloopError) as refused:
            await rl.cancel_review(sent.review_id, parent_revision=1)
        assert (refused.value.status, refused.value.code) == (409, "terminal")
        assert "get_review" in refused.value.allowed_actions
        with pytest.raises(ReviewloopError) as missing:
            await rl.send_email(to=["vp@acme.com"], subject="Q3", body_text="Hi")
        assert missing.value.code == "intent_required"
        assert (await rl.get_contract_manifest()).version == CONTRACT_VERSION


async def test_the_client_follows_the_published_retry_table_and_never_repeats_a_stale_write(api: Api) -> None:
    """``stale`` is worth repeating, but only after a re-read: the client reports it once (one request) and
    says so with ``is_retryable``; ``terminal`` is not worth repeating. The manifest serves the same table."""
    agent, _ = await keys(api)
    async with AsyncReviewloop(url(api), agent) as rl:
        manifest = await rl.get_contract_manifest()
        assert {code for code, yes in manifest.review_problem_retryable.items() if yes} == {
            "stale",
            "born_stale",
            "reply_context_changed",
            "unavailable",
        }
        assert len(manifest.review_problem_retryable) == 30
        assert manifest.review_problem_retry_limits == {"stale": 3, "born_stale": 1}
        sent = await rl.send_email(to=["vp@acme.com"], subject="Q3", body_text="Hi", intent=INTENT)
        await rl.submit_revision(sent.review_id, parent_revision=1, body_text="v2")
        requests: list[object] = []

        async def count(request: object) -> None:
            requests.append(request)

        rl.http.event_hooks["request"].append(count)
        with pytest.raises(ReviewloopError) as stale:
            await rl.submit_revision(sent.review_id, parent_revision=1, body_text="v2 again")
        assert (stale.value.code, stale.value.retryable, is_retryable(stale.value.problem)) == (
            "stale",
            True,
            True,
        )
        assert len(requests) == 1  # reported, never repeated blind: the caller re-reads and re-applies
        await rl.cancel_review(sent.review_id)
        with pytest.raises(ReviewloopError) as terminal:
            await rl.cancel_review(sent.review_id)
        assert (terminal.value.code, terminal.value.retryable) == ("terminal", False)
    assert not is_retryable({"code": "something_new"})  # an unknown code reads as internal


async def test_a_retried_send_with_one_idempotency_key_is_one_review(api: Api) -> None:
    agent, _ = await keys(api)
    async with AsyncReviewloop(url(api), agent) as rl:
        call = Verbs.send_email(
            to=["vp@acme.com"], subject="Q3", body_text="Hi", intent=INTENT, idempotency_key="k-1"
        )
        first, again = await rl.run(call), await rl.run(call)
        assert first.review_id == again.review_id
        assert len((await rl.list_reviews()).items) == 1


async def test_sync_client_reads_the_same_contract(api: Api) -> None:
    agent, _ = await keys(api)

    def work() -> tuple[str, int]:
        with Reviewloop(url(api), agent) as rl:
            sent = rl.send_email(to=["vp@acme.com"], subject="Q3", body_text="Hi", intent=INTENT)
            return rl.get_review(sent.review_id).state, len(rl.list_reviews().items)

    assert await asyncio.to_thread(work) == ("needs_review", 1)


async def test_the_example_agent_stops_on_the_terminal_event(api: Api) -> None:
    agent, human = await keys(api)
    example = load_example()
    async with AsyncReviewloop(url(api), agent) as rl, AsyncReviewloop(url(api), human) as console:
        running = asyncio.create_task(example.run_agent(rl, max_wait_s=60))
        for _ in range(200):  # until the agent's draft is in the human's queue
            if pending := (await console.list_reviews(state=["needs_review"])).items:
                break
            await asyncio.sleep(0.05)
        await console.cancel_review(pending[0].id, parent_revision=pending[0].revision)
        outcome = await asyncio.wait_for(running, 60)
        assert (outcome.review_id, outcome.reason) == (pending[0].id, "cancelled")
        assert outcome.payload["state"] == "cancelled"
        # The terminal nudge was acked: nothing is left to drain.
        assert (await rl.list_review_events()).events == []


async def test_the_client_rejects_a_graduation_proposal_and_lifts_blocks(api: Api) -> None:
    """The console verbs of the client: an admin rejects a proposal and its agent reads why; an admin
    lists and lifts blocks and suppressions."""
    project = await api.project()
    pid = project["project_id"]
    agent = (await api.key(pid))["api_key"]
    admin = (await api.key(pid, "admin"))["api_key"]
    async with AsyncReviewloop(url(api), agent) as rl, AsyncReviewloop(url(api), admin) as console:
        category = await rl.create_category(name="renewals")
        status = await rl.propose_graduation(category.id, note="clean for weeks", evidence={"approvals": 20})
        assert (status.category_id, status.next_state) == (category.id, "auto_notify")
        [proposal] = (await rl.list_graduation_proposals_of_category(category.id)).proposals
        assert proposal.evidence == {"approvals": 20}
        rejected = await console.reject_graduation_proposal(pid, proposal.id, reason="Not yet.")
        assert (rejected.status, rejected.reason) == ("rejected", "Not yet.")
        seen = (await rl.list_graduation_proposals_of_category(category.id)).proposals
        assert [(p.id, p.status, p.reason) for p in seen] == [(proposal.id, "rejected", "Not yet.")]

        await api.http.post(
            f"/v1/admin/projects/{pid}/blocks", json={"address": "no@acme.com"}, headers=api.auth(admin)
        )
        await api.http.post(
            f"/v1/admin/projects/{pid}/suppressions", json={"address": "no@acme.com"}, headers=api.auth(admin)
        )
        [listed] = (await console.list_blocked_and_suppressed(pid)).contacts
        assert (listed.address, listed.blocked, listed.suppressed) == ("no@acme.com", True, True)
        assert listed.blocked_at is not None and listed.blocked_by
        assert not (await console.unblock_recipient(pid, "no@acme.com")).blocked
        assert not (await console.unsuppress_recipient(pid, "no@acme.com")).suppressed
        assert (await console.list_blocked_and_suppressed(pid)).contacts == []
        with pytest.raises(ReviewloopError) as missing:
            await console.unblock_recipient(pid, "no@acme.com")
        assert missing.value.status == 404
