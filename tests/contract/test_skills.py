"""The skills are part of the contract (spec 000): each manifest skill ships as skills/<name>/SKILL.md, and
every verb a skill tells an agent to call is a verb of the contract."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from reviewloop.client import TERMINAL_REASONS, Verbs
from reviewloop.contract import CONTRACT_MANIFEST, CONTRACT_VERSION
from reviewloop.errors import Code

SKILLS = Path(__file__).parents[2] / "skills"
VERB_SHAPED = re.compile(r"`([a-z]+(?:_[a-z]+)+)`")
VERB_PREFIXES = ("send_", "reply_", "forward_", "get_", "list_", "submit_", "restamp_", "cancel_", "post_",
                 "wait_", "ack_", "save_", "propose_", "create_")  # fmt: skip


@pytest.mark.parametrize("name", CONTRACT_MANIFEST["skills"])
def test_each_manifest_skill_ships_with_its_name_and_version(name: str) -> None:
    text = (SKILLS / name / "SKILL.md").read_text()
    front = yaml.safe_load(text.split("---")[1])
    assert front["name"] == name
    assert len(front["description"]) > 50
    assert CONTRACT_VERSION in text


@pytest.mark.parametrize("name", CONTRACT_MANIFEST["skills"])
def test_every_verb_a_skill_names_is_a_contract_verb(name: str) -> None:
    text = (SKILLS / name / "SKILL.md").read_text()
    not_verbs = {code.value for code in Code} | set(TERMINAL_REASONS)  # problem codes and nudge reasons
    named = {v for v in VERB_SHAPED.findall(text) if v.startswith(VERB_PREFIXES)} - not_verbs
    assert named, "a skill that names no verb teaches nothing"
    assert named <= set(dir(Verbs)), named - set(dir(Verbs))


def _contract_words() -> set[str]:
    """Every name the contract has: its verbs (and the catalog's tool names), the fields of its shapes,
    problem codes, enum values, review states, nudge reasons and decision values."""
    from gateway.mcp import CATALOG_ALIASES, CLIENT_ID_ARGUMENT, ID_ARGUMENT
    from reviewloop.shapes import component_schemas

    words = set(dir(Verbs)) | set(CATALOG_ALIASES) | {ID_ARGUMENT, CLIENT_ID_ARGUMENT, "idempotency_key"}
    stack: list[object] = list(component_schemas().values())
    while stack:  # every field name and every enum value of every shape
        node = stack.pop()
        if isinstance(node, dict):
            words |= set(node.get("properties", {})) | set(node.get("enum", []))
            stack += list(node.values())
        elif isinstance(node, list):
            stack += node
    words |= {code.value for code in Code} | set(REVIEW_STATES) | set(REASONS) | set(DECISIONS)
    return words | set(NUDGE_PAYLOAD)


REVIEW_STATES = ("needs_review", "in_review", "chatting", "rejected", "approved", "failed", "sent", "auto_sent",
                 "cancelled", "stale", "stalled")  # fmt: skip
REASONS = ("redraft_requested", "feedback_added", "rejected", "rule_changed", "recheck_category",
           "propagate_general_rule", "sent", "send_failed", "cancelled", "front_run_next", "approved",
           "staleness")  # fmt: skip
DECISIONS = ("approved", "edited", "rejected", "escalated", "allowed_action")
# The fields of a nudge's free-form payload the skills name (spec 000, "Nudge").
NUDGE_PAYLOAD = (
    "pending_count", "siblings", "suggested_batch", "your_parent_revision", "current_revision", "merged_from"
)  # fmt: skip
IDENTIFIER = re.compile(r"`([a-z]+(?:_[a-z]+)*)`")


@pytest.mark.parametrize("name", CONTRACT_MANIFEST["skills"])
def test_every_tool_and_field_a_skill_names_exists(name: str) -> None:
    """A skill that tells an agent to call a tool or read a field the contract lacks teaches a 422 or a
    KeyError: every backticked identifier is a verb, a field of a shape, a code, a state or a reason."""
    text = (SKILLS / name / "SKILL.md").read_text()
    unknown = set(IDENTIFIER.findall(text)) - _contract_words()
    assert unknown == set()
