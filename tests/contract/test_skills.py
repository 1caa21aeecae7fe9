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
