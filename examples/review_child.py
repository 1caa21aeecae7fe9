"""A harness's review-child runner: the `extrovert-review-child` skill (spec 001 "The review child"), in code.

    python examples/review_child.py --url http://127.0.0.1:8080 --key rlk_... --session s1

On each `session/event` of type `turn/end` it records the turn with the gateway (counters and gate); when
the answer is `review`, it forks the child after a zero-delay tick, seeded with the completed conversation
(never the in-flight turn), narrowed to `skill` + `skill_manage`, with the skill's own prompt and
`delivery: caller`; it aborts the child after `timeoutMinutes` and tells the gateway how the review ended.
The prompt and the tool list are read from the skill itself, so the runner cannot drift from it. The model
call is the harness's (`Fork`); `main` below wires a stub child that answers `no skill update`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

log = logging.getLogger("review_child")

SKILL = Path(__file__).resolve().parents[1] / "skills" / "extrovert-review-child" / "SKILL.md"


@dataclass(frozen=True)
class ChildContract:
    """What the skill says a child is: its prompt, its tools, where its answer goes."""

    prompt: str
    tools: tuple[str, ...]
    delivery: str
    order: tuple[str, ...]


def read_skill(path: Path = SKILL) -> ChildContract:
    """The child's contract as the skill states it: its prompt block and its summary block."""
    text = path.read_text()
    prompt = re.search(r"```text\n(.*?)```", text, re.S)
    summary = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert prompt and summary, f"{path} lost its prompt or its summary block"
    child = yaml.safe_load(summary.group(1))["child"]
    return ChildContract(
        prompt.group(1).strip(), tuple(child["tools"]), child["delivery"], tuple(child["order"])
    )


@dataclass
class Turn:
    """One message of the parent conversation."""

    role: str  # user | assistant | tool
    text: str
    human: bool = False  # a direct-human message (not a tool result, not a subagent)
    done: bool = True  # False while the turn is in flight


@dataclass
class Conversation:
    """The parent session as the harness holds it."""

    turns: list[Turn] = field(default_factory=list)
    loaded_skills: list[str] = field(default_factory=list)

    def completed(self) -> list[Turn]:
        """The fork seed: the completed conversation; the in-flight turn is never part of it."""
        return [t for t in self.turns if t.done]


@dataclass(frozen=True)
class ChildSpec:
    """What the harness forks: the seed, the prompt, the narrowed tools, where the answer goes."""

    seed: tuple[Turn, ...]
    prompt: str
    tools: tuple[str, ...]
    delivery: str


# The harness's fork: run a child subagent to its final answer (a model call; cancellable).
Fork = Callable[[ChildSpec], Awaitable[str]]


@dataclass
class ReviewChildRunner:
    """Follows the skill for one top-level session."""

    http: httpx.AsyncClient  # the gateway, with the session's key
    session_id: str
    conversation: Conversation
    fork: Fork
    contract: ChildContract = field(default_factory=read_skill)
    timeout_s: float | None = None  # None: the project's timeoutMinutes from the gate configuration
    child: asyncio.Task[str | None] | None = None
    outputs: list[str] = field(default_factory=list)  # delivery: caller -- the answers come back here

    async def on_session_event(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """``session/event``: only ``turn/end`` matters. Answers the gateway's turn result, if recorded."""
        if event.get("type") != "turn/end":
            return None
        turn = event.get("turn", {})
        result = await self._post(
            f"/v1/sessions/{self.session_id}/turns",
            {
                "origin": event.get("origin", ""),
                "depth": event.get("depth", 0),
                "status": turn.get("status", "completed"),
                "tool_calls": turn.get("tool_calls", 0),
                "digest": self._digest(),
            },
        )
        decision = (result.get("decision") or {}).get("decision")
        if decision == "review" and event.get("origin") != "subagent" and not event.get("depth"):
            self.child = asyncio.create_task(self._review())
        return result

    def _digest(self) -> dict[str, Any]:
        """The bounded digest (tool output is never sent).

        The last direct-human and assistant messages, and the skills loaded during the turn.
        """
        done = self.conversation.completed()
        human = next((t.text for t in reversed(done) if t.role == "user" and t.human), "")
        assistant = next((t.text for t in reversed(done) if t.role == "assistant"), "")
        return {
            "last_human_message": human[:3000],
            "last_assistant_message": assistant[:3000],
            "loaded_skills": list(self.conversation.loaded_skills),
        }

    async def _review(self) -> str | None:
        await asyncio.sleep(0)  # the zero-delay tick: the turn that just ended joins the seed
        spec = ChildSpec(
            seed=tuple(self.conversation.completed()),
            prompt=self.contract.prompt,
            tools=self.contract.tools,
            delivery=self.contract.delivery,
        )
        timeout_s = self.timeout_s if self.timeout_s is not None else await self._timeout_s()
        try:
            answer = await asyncio.wait_for(self.fork(spec), timeout_s)
        except TimeoutError:
            log.warning("review child aborted after %.0f s", timeout_s)
            await self._finish(succeeded=False)
            return None
        except Exception:
            log.exception("review child failed")
            await self._finish(succeeded=False)
            return None
        self.outputs.append(answer)  # to the caller only: never into the parent conversation
        await self._finish(succeeded=True)
        return answer

    async def _timeout_s(self) -> float:
        config = (await self.http.get("/v1/review-rounds/gate-config")).raise_for_status().json()
        return float(config["effective"].get("timeout_minutes", 5)) * 60

    async def _finish(self, succeeded: bool) -> None:
        await self._post(f"/v1/sessions/{self.session_id}/review/finish", {"succeeded": succeeded})

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post(path, json=body)
        response.raise_for_status()
        return dict(response.json())

    async def wait(self) -> str | None:
        """The running child's answer (None when there is none, or it was aborted)."""
        if self.child is None:
            return None
        child, self.child = self.child, None
        return await child


async def _stub_child(spec: ChildSpec) -> str:
    return "no skill update"


async def main() -> None:
    """Drive a session of stub turns against a gateway."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--session", default="demo-session")
    args = parser.parse_args()
    headers = {"Authorization": f"Bearer {args.key}"}
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=30) as http:
        conversation = Conversation()
        runner = ReviewChildRunner(http, args.session, conversation, _stub_child)
        for i in range(12):
            conversation.turns += [
                Turn("user", f"question {i}", human=True),
                Turn("assistant", f"answer {i}"),
            ]
            result = await runner.on_session_event({"type": "turn/end", "turn": {"status": "completed"}})
            log.info("turn %d: %s", i, result)
            with contextlib.suppress(Exception):
                if (answer := await runner.wait()) is not None:
                    log.info("review child answered the caller: %s", answer)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main())
