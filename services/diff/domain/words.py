"""A word-level diff of two texts (issue 38: a rule proposed from a reviewer's edit). Words are runs of
non-space characters; the whitespace between them rides with the word before it (leading whitespace with the first), so the segments put back
together are exactly the two texts. Pure."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\s*\S+\s*|\s+")


@dataclass(frozen=True)
class Segment:
    """A run of words: ``equal`` on both sides, or changed (``replace``, ``insert``, ``delete``)."""

    op: str
    before: str
    after: str


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def word_diff(before: str, after: str) -> list[Segment]:
    """The segments of ``before`` -> ``after``: joined, each side is its text again. Words compare
    without their trailing whitespace, so a re-wrapped line is no change of its words."""
    old, new = tokens(before), tokens(after)
    matcher = difflib.SequenceMatcher(
        None, [t.strip() for t in old], [t.strip() for t in new], autojunk=False
    )
    out = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        was, now = "".join(old[i1:i2]), "".join(new[j1:j2])
        out.append(Segment("equal" if was.split() == now.split() else op, was, now))  # whitespace alone
    return out
