"""A rule proposed from a reviewer's edit, and the rules it may conflict with (issue 38). Pure.

The proposed text quotes the edit's changed runs of words ("Write “X” instead of “Y”."), the words the
reviewer can then rewrite. A rule *may conflict* with another live rule (active, or the proposal on top of
its lineage) of the same place on the ladder (layer, project, agent, scope and category: the drafts both
reach) when their texts are the same (``duplicate``: a save is refused), when they share at least half the
content words of the shorter one with one negated and the other not (``contradiction``: "Never mention
pricing" against "Mention pricing up front"), or share that much without that (``overlap``: they may say
the same thing twice)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rules.domain.guardrails import MAX_RULE_CHARS, normalize
from rules.domain.ladder import RuleRev, State, in_force

SHARED = 0.5  # the share of the shorter rule's content words two rules must share to overlap
_QUOTE_CHARS = 80  # a changed run longer than this is quoted in part
_MAX_CHANGES = 3  # a rule is one or two sentences: the first changes of the edit
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_NEGATIONS = frozenset({"not", "never", "no", "don't", "dont", "avoid", "without", "stop", "omit", "leave"})
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "to",
        "of",
        "and",
        "or",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "as",
        "is",
        "are",
        "be",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "your",
        "you",
        "we",
        "our",
        "us",
        "i",
        "me",
        "my",
        "their",
        "them",
        "they",
        "he",
        "she",
        "his",
        "her",
        "will",
        "would",
        "can",
        "could",
        "should",
        "than",
        "then",
        "so",
    ]
)


@dataclass(frozen=True)
class Change:
    """A changed run of words of an edit: ``replace``, ``insert`` or ``delete``."""

    op: str
    before: str
    after: str


@dataclass(frozen=True)
class Conflict:
    rule: RuleRev
    kind: str  # "duplicate" | "contradiction" | "overlap"


def _quote(text: str) -> str:
    """The run's words as a rule quotes them: one line, without its closing punctuation."""
    words = " ".join(text.split()).rstrip(".,;:!?")
    return words if len(words) <= _QUOTE_CHARS else words[: _QUOTE_CHARS - 1].rstrip() + "…"


def propose(changes: Sequence[Change]) -> str:
    """The rule text an edit suggests, or "" when it changed no word."""
    sentences = []
    for change in changes:
        before, after = _quote(change.before), _quote(change.after)
        if change.op == "replace" and before and after:
            sentences.append(f"Write “{after}” instead of “{before}”.")
        elif change.op in ("insert", "replace") and after:
            sentences.append(f"Include “{after}”.")
        elif change.op in ("delete", "replace") and before:
            sentences.append(f"Leave out “{before}”.")
        if len(sentences) == _MAX_CHANGES:
            break
    return " ".join(sentences)[:MAX_RULE_CHARS]


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.casefold()) if w not in _STOP}


def _live(revisions: Sequence[RuleRev], except_lineage: str = "") -> Iterator[RuleRev]:
    """Each other lineage's revision in force and its head, unless retired."""
    lineages: dict[str, list[RuleRev]] = {}
    for revision in revisions:
        lineages.setdefault(revision.lineage_id, []).append(revision)
    for lineage_id, history in lineages.items():
        if lineage_id == except_lineage:
            continue
        history.sort(key=lambda r: r.rev)
        seen = set()
        for other in (in_force(history), history[-1]):
            if other is not None and other.state is not State.RETIRED and other.id not in seen:
                seen.add(other.id)
                yield other


def same_place(a: RuleRev, b: RuleRev) -> bool:
    return (a.layer, a.project_id, a.agent_id, a.scope, a.category_id) == (
        b.layer,
        b.project_id,
        b.agent_id,
        b.scope,
        b.category_id,
    )


def conflicts(candidate: RuleRev, revisions: Sequence[RuleRev]) -> list[Conflict]:
    """The live rules of ``candidate``'s place that may conflict with it, duplicates first."""
    text, words = normalize(candidate.rule_text), _words(candidate.rule_text)
    negated = bool(words & _NEGATIONS)
    found = []
    for other in _live(revisions, candidate.lineage_id):
        if not same_place(other, candidate):
            continue
        if normalize(other.rule_text) == text:
            found.append(Conflict(other, "duplicate"))
            continue
        theirs = _words(other.rule_text)
        content, their_content = words - _NEGATIONS, theirs - _NEGATIONS
        shorter = min(len(content), len(their_content))
        if shorter and len(content & their_content) >= SHARED * shorter:
            contradicts = negated != bool(theirs & _NEGATIONS)
            found.append(Conflict(other, "contradiction" if contradicts else "overlap"))
    order = {"duplicate": 0, "contradiction": 1, "overlap": 2}
    return sorted(found, key=lambda c: (order[c.kind], c.rule.id))
