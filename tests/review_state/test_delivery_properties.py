"""Property test (hypothesis): whatever each try's provider does (takes it, defers before DATA, refuses,
loses the answer after DATA, drops the connection, or its worker dies before or after DATA) and however
often the sweep runs, a review's message goes out at most once, a review is ``sent`` exactly when it went
out and ``failed`` only when it did not, nothing but evidence closes a try past DATA, and the review ends
with exactly one terminal nudge."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from review_state import app
from review_state.app import Decision, Env
from review_state.providers import AtData, EmlProvider, NotSent, OutcomeUnknown, Refused

from tests.review_state.conftest import AGENT, HUMAN, queued, reasons
from tests.review_state.test_delivery import lapse_leases

OUTCOMES = ["ok", "defer", "refuse", "lost_answer", "dropped", "die_before_data", "die_after_data"]


class Scripted(EmlProvider):
    """Each try does the next scripted outcome (then ``ok``), and counts what went out by Message-ID."""

    def __init__(self, directory: Path, script: Sequence[str]) -> None:
        super().__init__(directory)
        self.script = list(script)
        self.sent: Counter[str] = Counter()

    async def deliver(
        self, raw: bytes, sender: str, recipients: Sequence[str], rfc_message_id: str, at_data: AtData
    ) -> None:
        outcome = self.script.pop(0) if self.script else "ok"
        if outcome == "defer":
            raise NotSent("451 try again later")
        if outcome == "refuse":
            raise Refused("550 mailbox unavailable")
        if outcome == "die_before_data":
            raise RuntimeError("the worker died before DATA")
        if outcome == "dropped":  # the connection died during DATA; the relay kept nothing
            await at_data()
            raise OutcomeUnknown("SMTPServerDisconnected")
        await super().deliver(raw, sender, recipients, rfc_message_id, at_data)
        self.sent[rfc_message_id] += 1
        if outcome == "lost_answer":
            raise OutcomeUnknown("SMTPReadTimeoutError")
        if outcome == "die_after_data":
            raise RuntimeError("the worker died after the relay took it")


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    script=st.lists(st.sampled_from(OUTCOMES), max_size=6),
    sweeps=st.integers(min_value=0, max_value=4),
)
async def test_any_provider_behaviour_and_sweeps_send_at_most_once_and_end_truthfully(
    env: Env, tmp_path: Path, script: list[str], sweeps: int
) -> None:
    env.provider = provider = Scripted(tmp_path / "outbox", script)
    review = await queued(env)
    review = await app.open_review(env, HUMAN, review.id, review.revision, review.version)
    decided = await app.decide(env, HUMAN, review.id, Decision("approve", review.revision, review.version))
    rfc_id = decided.rfc_message_id or ""
    for _ in range(sweeps):  # sweeps while leases are still live change nothing
        await app.reconcile(env)
        assert provider.sent[rfc_id] <= 1
    for _ in range(len(script) + 1):  # a round per scripted try, then the ``ok`` one
        await lapse_leases(env)
        await app.reconcile(env)
        assert provider.sent[rfc_id] <= 1
    now, _ = await app.get_review(env, AGENT, review.id)
    if now.state.value == "sent":
        assert provider.sent[rfc_id] == 1 and await reasons(env, review.id) == ["sent"]
    else:  # the provider refused it before it ever went out
        assert now.state.value == "failed", now.state
        assert provider.sent[rfc_id] == 0 and await reasons(env, review.id) == ["send_failed"]
        await app.cancel(env, AGENT, review.id, now.revision, "")
