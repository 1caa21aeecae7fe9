"""The review child of spec 001 as the `extrovert-review-child` skill states it, followed by the example
runner (examples/review_child.py) against the live gateway: what starts it (`turn/end`, after a zero-delay
tick), its seed (the in-flight turn excluded), `delivery: caller`, the narrowed tools, the prompt's order,
the abort after `timeoutMinutes`, and the finish that tells dispatch_budget how it ended."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import yaml
from reviewloop.contract import CONTRACT_VERSION

from tests.conftest import Api

ROOT = Path(__file__).parents[2]
SKILL = ROOT / "skills" / "extrovert-review-child" / "SKILL.md"


def _runner_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("review_child", ROOT / "examples" / "review_child.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["review_child"] = module
    spec.loader.exec_module(module)
    return module


rc = _runner_module()


def test_the_skill_states_the_child_and_the_runner_reads_it_from_there() -> None:
    text = SKILL.read_text()
    front = yaml.safe_load(text.split("---")[1])
    assert front["name"] == "extrovert-review-child" and len(front["description"]) > 50
    assert CONTRACT_VERSION in text
    for said in ("turn/end", "zero-delay tick", "delivery: caller", "in-flight turn is", "timeoutMinutes",
                 "`skill`", "`skill_manage`", "no skill update"):  # fmt: skip
        assert said in text, said
    contract = rc.read_skill()
    assert contract.tools == ("skill", "skill_manage") and contract.delivery == "caller"
    steps = [contract.prompt.index(s) for s in ("1. Patch a skill that was loaded", "2. Otherwise patch an existing umbrella",
                                                "3. Otherwise create one new class-level skill", "4. Otherwise answer exactly: no skill update")]  # fmt: skip
    assert steps == sorted(steps)  # loaded skill, then umbrella, then a new class-level skill, else none
    assert contract.order[-1] == "no skill update"


async def _session(api: Api, timeout_minutes: int = 3) -> httpx.AsyncClient:
    project = (await api.project())["project_id"]
    admin = api.auth((await api.key(project, "admin"))["api_key"])
    config = {"enabled": True, "gate": "counters", "turn_interval": 2, "tool_call_threshold": 1000,
              "cooldown_minutes": 0, "max_per_session": 8, "timeout_minutes": timeout_minutes}  # fmt: skip
    set_config = await api.http.put("/v1/review-rounds/gate-config", json=config, headers=admin)
    assert set_config.status_code == 200, set_config.text
    agent = api.auth((await api.key(project))["api_key"])
    return httpx.AsyncClient(base_url=str(api.http.base_url), headers=agent, timeout=30)


def _turn_end(conversation: Any, i: int, **event: Any) -> dict[str, Any]:
    return {"type": "turn/end", "turn": {"status": "completed", "tool_calls": 1}, **event}


async def test_the_runner_forks_the_child_as_the_skill_says_and_finishes_it(api: Api) -> None:
    http = await _session(api)
    conversation = rc.Conversation(loaded_skills=["deploy-notes"])
    forked: list[Any] = []

    async def child(spec: Any) -> str:
        forked.append(spec)
        return "patched skill deploy-notes"

    runner = rc.ReviewChildRunner(http, "sess-1", conversation, child)
    assert await runner._timeout_s() == 180  # timeoutMinutes is the project's gate configuration

    conversation.turns += [rc.Turn("user", "deploy it", human=True), rc.Turn("assistant", "deployed")]
    first = await runner.on_session_event(_turn_end(conversation, 1))
    assert first["counted"] and "decision" not in first and runner.child is None  # not due yet
    # A subagent's turn and a non-turn/end event start nothing and count nothing.
    sub = await runner.on_session_event(_turn_end(conversation, 2, origin="subagent", depth=1))
    assert not sub["counted"] and runner.child is None
    assert await runner.on_session_event({"type": "turn/start"}) is None

    # Turn 2 ends: the harness emits turn/end, then (same tick) appends the finished turn, and a new
    # turn starts in flight. The child's seed holds the finished turn and never the in-flight one.
    conversation.turns.append(rc.Turn("user", "use blue-green next time", human=True))
    due = asyncio.ensure_future(runner.on_session_event(_turn_end(conversation, 3)))
    result = await due
    assert result["decision"]["decision"] == "review" and result["counters"]["in_flight"], result
    assert forked == []  # nothing is forked synchronously with turn/end
    conversation.turns.append(rc.Turn("assistant", "noted: blue-green"))  # the finished turn, same tick
    conversation.turns.append(rc.Turn("user", "now the next thing", human=True, done=False))  # in flight
    answer = await runner.wait()
    assert answer == "patched skill deploy-notes" and runner.outputs == [answer]
    (spec,) = forked
    assert [t.text for t in spec.seed][-1] == "noted: blue-green"
    assert all(t.done for t in spec.seed) and "now the next thing" not in [t.text for t in spec.seed]
    assert (spec.tools, spec.delivery, spec.prompt) == (
        ("skill", "skill_manage"),
        "caller",
        runner.contract.prompt,
    )
    assert answer not in [t.text for t in conversation.turns]  # delivery: caller, never the parent
    # The finish reached dispatch_budget: a successful review resets the counters, nothing in flight.
    again = await runner.on_session_event(_turn_end(conversation, 4))
    assert again["counters"]["in_flight"] is False and again["counters"]["turns"] == 1, again
    assert again["counters"]["reviews"] == 1
    await http.aclose()


async def test_the_runner_aborts_a_child_after_its_timeout_and_finishes_it_unsucceeded(api: Api) -> None:
    http = await _session(api)
    conversation = rc.Conversation()
    cancelled = asyncio.Event()

    async def hangs(spec: Any) -> str:
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.set()
        return "never"

    runner = rc.ReviewChildRunner(http, "sess-2", conversation, hangs, timeout_s=0.3)
    for i in range(2):
        conversation.turns += [rc.Turn("user", f"q{i}", human=True), rc.Turn("assistant", f"a{i}")]
        result = await runner.on_session_event(_turn_end(conversation, i))
    assert result["decision"]["decision"] == "review", result
    assert await runner.wait() is None and cancelled.is_set() and runner.outputs == []
    # Finished as not succeeded: no longer in flight, the counters kept (a failed review resets nothing).
    conversation.turns += [rc.Turn("user", "q2", human=True), rc.Turn("assistant", "a2")]
    after = await runner.on_session_event(_turn_end(conversation, 2))
    # Still due at once (the counters were not reset, or turn 3 of interval 2 would not be due).
    assert after["decision"]["decision"] == "review", after
    await runner.wait()
    await http.aclose()
