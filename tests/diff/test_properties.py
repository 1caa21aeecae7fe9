"""Property tests: the hunks of diff_json rebuild ``after`` from ``before``; equal inputs diff empty."""

from __future__ import annotations

import random
from typing import Any

import orjson
from diff.domain import lines
from diff.domain.fields import FIELDS, Attachment, Kind, MessageFields
from diff.domain.lines import opcodes
from diff.domain.message import compute
from hypothesis import given, settings
from hypothesis import strategies as st

# A small pool of lines makes repeats (no unique anchor) and near-misses common, on purpose.
LINE = st.sampled_from(["", "Hi Dana,", "Thanks.", "Let me know.", "Best,", "Sam", "x\r", "  ", "é ✓"])
ENDING = st.sampled_from(["\n", "\r\n"])


@st.composite
def texts(draw: Any) -> str:
    if draw(st.booleans()):
        return str(draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=40)))
    lines = draw(st.lists(st.tuples(LINE, ENDING), max_size=25))
    text = "".join(line + ending for line, ending in lines)
    return text[: len(text) - draw(st.integers(0, 2))]  # sometimes no final newline, or a bare CR


ADDRESS = st.sampled_from(["vp@acme.com", "cto@acme.com", "sam@ours.com", "", "Dana <d@acme.com>"])
ATTACHMENT = st.builds(
    Attachment,
    st.sampled_from(["pilot.pdf", "logo.png"]),
    st.sampled_from(["application/pdf", "image/png"]),
    st.sampled_from(["1" * 64, "2" * 64]),
)
MESSAGES = st.builds(
    MessageFields,
    subject=st.sampled_from(["", "Q3 pilot", "Q3 pilot: Thursday?"]),
    body_text=texts(),
    body_html=texts(),
    to=st.lists(ADDRESS, max_size=4).map(tuple),
    cc=st.lists(ADDRESS, max_size=3).map(tuple),
    bcc=st.lists(ADDRESS, max_size=2).map(tuple),
    reply_to=st.sampled_from(["", "sam@ours.com"]),
    headers=st.dictionaries(
        st.sampled_from(["X-A", "x-a", "Importance", "X-Campaign"]), st.sampled_from(["1", "2", ""])
    ),
    attachments=st.lists(ATTACHMENT, max_size=3).map(tuple),
)


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _units(kind: Kind, value: Any) -> list[str]:
    if kind is Kind.TEXT:
        return _lines(value)
    if kind is Kind.MAP:
        return [f"{k}: {v}" for k, v in sorted(value.items(), key=lambda kv: (kv[0].lower(), kv[0]))]
    if kind is Kind.ATTACHMENTS:
        return [a.label() for a in value]
    return list(value)


def apply(before: MessageFields, hunks: list[dict[str, Any]], name: str, kind: Kind) -> Any:
    """Apply one field's hunks to ``before``, checking each hunk's ``before`` is what it replaces."""
    mine = [h for h in hunks if h["field"] == name]
    value = getattr(before, name)
    if kind is Kind.SCALAR:
        assert len(mine) <= 1
        if mine:
            assert mine[0]["before"] == value
            return mine[0]["after"]
        return value
    units = _units(kind, value)
    for hunk in reversed(mine):
        start = hunk["before_start"] - 1
        if kind is Kind.TEXT:
            old, new = _lines(hunk["before"]), _lines(hunk["after"])
        else:
            old = [] if hunk["op"] == "insert" else [hunk["before"]]
            new = [] if hunk["op"] == "delete" else [hunk["after"]]
        assert units[start : start + len(old)] == old
        units[start : start + len(old)] = new
    return "".join(units) if kind is Kind.TEXT else units


def _content(text: str) -> list[str]:
    """What a reader compares: lines with CRLF read as LF, the final newline not a line of its own."""
    return text.replace("\r\n", "\n").split("\n")[: -1 if text.endswith("\n") else None] if text else []


@settings(max_examples=150, deadline=None)
@given(MESSAGES, MESSAGES)
def test_applying_the_hunks_to_before_yields_after(before: MessageFields, after: MessageFields) -> None:
    diff = compute(before, after)
    hunks = orjson.loads(diff.diff_json)["hunks"]
    for name, kind in FIELDS:
        expected = (
            _units(kind, getattr(after, name))
            if kind in (Kind.MAP, Kind.ATTACHMENTS)
            else getattr(after, name)
        )
        got = apply(before, hunks, name, kind)
        assert (got if kind is not Kind.LIST else tuple(got)) == expected, name
        if kind is Kind.TEXT:
            content_changed = _content(getattr(before, name)) != _content(getattr(after, name))
            assert (name in diff.fields_changed) == content_changed
        else:
            assert (name in diff.fields_changed) == (getattr(before, name) != getattr(after, name))
    assert list(diff.fields_changed) == [name for name, _ in FIELDS if name in diff.fields_changed]


@settings(max_examples=100, deadline=None)
@given(MESSAGES)
def test_identical_inputs_have_no_fields_changed_and_no_hunks(message: MessageFields) -> None:
    diff = compute(message, message)
    assert diff.fields_changed == ()
    assert orjson.loads(diff.diff_json) == {"fields_changed": [], "hunks": []}


@settings(max_examples=100, deadline=None)
@given(MESSAGES, MESSAGES)
def test_same_inputs_give_the_same_bytes(before: MessageFields, after: MessageFields) -> None:
    first, again = compute(before, after), compute(before, after)
    assert (first.diff_json, first.diff_unified) == (again.diff_json, again.diff_unified)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=60), st.lists(st.integers(0, 6), max_size=60))
def test_line_opcodes_cover_both_sides_and_equal_runs_are_equal(a: list[int], b: list[int]) -> None:
    i = j = 0
    for tag, i1, i2, j1, j2 in opcodes(a, b):
        assert (i1, j1) == (i, j)
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))


@st.composite
def block_edits(draw: Any) -> tuple[list[str], list[str], int]:
    """A long text of distinct lines and a few block edits of it, some longer than the first window."""
    before = [f"line {k}" for k in range(draw(st.integers(0, 400)))]
    after = list(before)
    edits = draw(st.integers(1, 4))
    for n in range(edits):
        at = draw(st.integers(0, len(after)))
        size = draw(st.integers(1, 150))
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        new = [f"new {n}.{k}" for k in range(size)]
        if kind == "insert":
            after[at:at] = new
        elif kind == "delete":
            del after[at : at + size]
        else:
            after[at : at + size] = new[: draw(st.integers(1, size))]
    return before, after, edits


@settings(max_examples=100, deadline=None)
@given(block_edits())
def test_block_edits_of_distinct_lines_are_found_as_at_most_one_hunk_each(
    case: tuple[list[str], list[str], int],
) -> None:
    before, after, edits = case
    ops = opcodes(before, after)
    rebuilt: list[str] = []
    for tag, i1, i2, j1, j2 in ops:
        rebuilt.extend(before[i1:i2] if tag == "equal" else after[j1:j2])
    assert rebuilt == after
    assert sum(tag != "equal" for tag, *_ in ops) <= edits


def test_dense_edits_past_the_work_budget_still_rebuild_after(monkeypatch: Any) -> None:
    monkeypatch.setattr(lines, "MAX_MYERS_STEPS", 200)
    rng = random.Random(7)
    a = [rng.choice("abc") for _ in range(3000)]
    b = [rng.choice("abc") for _ in range(3000)]
    rebuilt: list[str] = []
    for tag, i1, i2, j1, j2 in lines.opcodes(a, b):
        rebuilt.extend(a[i1:i2] if tag == "equal" else b[j1:j2])
    assert rebuilt == b
