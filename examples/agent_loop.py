"""A complete composing agent: submit a draft, drain the nudge queue, act on each nudge, stop on the terminal
event (the `extrovert-send-email` skill's loop, in code).

    python examples/agent_loop.py --url http://127.0.0.1:8080 --key rlk_...

The drafting itself (the words) is a stub here: a real agent calls its model where `redraft` is.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from reviewloop.client import TERMINAL_REASONS, AsyncReviewloop, ReviewloopError

log = logging.getLogger("agent_loop")

DRAFT: dict[str, Any] = {
    "to": ["vp@acme.com"],
    "subject": "Q3 pilot",
    "body_text": "Hi Dana,\n\nCan we find 20 minutes to talk about the Q3 pilot?\n\nSam",
    "intent": {
        "summary": "Re-engage cold lead at Acme about Q3 pilot",
        "meta": {"goal": "book_meeting", "recipient": "vp@acme.com", "prior_touches": 2},
    },
}


@dataclass
class Outcome:
    review_id: str
    reason: str
    payload: dict[str, Any]
    handled: list[str] = field(default_factory=list)


def redraft(body_text: str, rules: list[str]) -> str:
    """The agent's own judgment (its model) goes here; we never apply rules server-side."""
    return body_text + "".join(f"\n\n[applied: {rule}]" for rule in rules)


async def act(rl: AsyncReviewloop, review_id: str, reason: str, payload: dict[str, Any]) -> None:
    """One non-terminal nudge, per the skill's drain switch. Unknown reasons are acked and ignored."""
    if reason in ("redraft_requested", "rejected", "rule_changed"):
        rules = await rl.get_rules()  # the full ladder, with the composition token for this redraft
        review = await rl.get_review(review_id)
        if review.closed:
            return
        try:
            await rl.submit_revision(
                review_id,
                parent_revision=review.revision,
                subject=review.proposed_subject,
                text=redraft(review.proposed_body_text, [r.rule_text for r in rules.items]),
                composition_token=rules.composition_token,
            )
        except ReviewloopError as error:
            if error.code not in ("stale", "born_stale", "wrong_state", "terminal"):
                raise
            log.info(
                "redraft of %s refused (%s); the queue will tell us what happened", review_id, error.code
            )
    elif reason == "feedback_added":
        await rl.post_review_chat(review_id, text="Thanks, I will take that into the next draft.")
    else:
        log.info("ignoring nudge %s (additive reason or nothing to do)", reason)


async def run_agent(
    rl: AsyncReviewloop, *, draft: dict[str, Any] = DRAFT, max_wait_s: float = 300
) -> Outcome:
    """Submit ``draft`` and follow it to its terminal event."""
    submitted = await rl.send_email(**draft)
    review_id = submitted.review_id
    log.info("submitted %s: %s", review_id, submitted.kind)
    handled: list[str] = []
    deadline = asyncio.get_running_loop().time() + max_wait_s
    while asyncio.get_running_loop().time() < deadline:
        batch = await rl.wait_for_review_event(timeout_s=20)
        for event in batch.events:  # oldest first; act, then ack (a crash before the ack replays it)
            if event.review_id == review_id:
                handled.append(event.reason)
                if event.reason in TERMINAL_REASONS:
                    await rl.ack_review_event([(review_id, event.seq)])
                    return Outcome(review_id, event.reason, dict(event.payload or {}), handled)
                await act(rl, review_id, event.reason, dict(event.payload or {}))
            if event.review_id:
                await rl.ack_review_event([(event.review_id, event.seq)])
            else:  # a broadcast (seq 0: a project-wide rule or category change) is acked by its id
                await rl.ack_review_event(broadcast_ids=[event.id])
    # No terminal event in time: the definitive per-review answer is `closed` on the review itself.
    review = await rl.get_review(review_id)
    return Outcome(review_id, "timeout" if not review.closed else review.state, {}, handled)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--key", required=True, help="an agent API key (rlk_...)")
    parser.add_argument("--max-wait-s", type=float, default=300)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    async with AsyncReviewloop(args.url, args.key) as rl:
        outcome = await run_agent(rl, max_wait_s=args.max_wait_s)
    print(f"{outcome.review_id}: {outcome.reason} {outcome.payload}")


if __name__ == "__main__":
    asyncio.run(main())
