"""The structured proposed-vs-sent diff of spec 000 (``diff_json``) and its unified rendering.

Fields are compared in one fixed order (``FIELDS``), each by its kind:

- text (``body_text``, ``body_html``): line by line, as Unicode. CRLF and LF compare equal; lines that
  differ only in their endings become a hunk flagged ``line_endings_only`` and do not, alone, put the
  field in ``fields_changed``.
- scalar (``subject``, ``reply_to``): the whole value, one hunk.
- list (``to``, ``cc``, ``bcc``, ``attachments``): one hunk per added or removed item; attachments are
  items ``"<filename> (<content_type>; sha256=<hash>)"``, so a changed filename, type or content is a
  removed item and an added one.
- map (``headers``): one hunk per header name added, removed or given a new value.

A hunk is ``{field, op, before, after}`` as the spec's ``DiffHunk``; ``op`` is ``replace | insert |
delete``. Hunks of text, list and map fields add ``before_start`` and ``after_start``: the 1-based line
(or item) where the hunk begins on each side, so applying the hunks to ``before`` rebuilds ``after``
exactly. ``before``/``after`` of a text hunk are whole lines with their own line endings.

Pure: the same inputs give the same bytes (sorted keys where order is not the caller's, no time, no
randomness), so the diff is content-addressed by ``input_sha256``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, count
from typing import Any

from diff.domain.fields import (
    CONTEXT_LINES,
    FIELDS,
    Diff,
    Kind,
    MessageFields,
)
from diff.domain.lines import Opcode, opcodes

# --- text ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Lines:
    """A text as lines: ``parts`` (each line without its ``\\n``; a CRLF line keeps its ``\\r``) and
    ``keys`` (what is compared: the CR of CRLF dropped). ``final_newline``: the last line ends in one."""

    parts: list[str]
    keys: list[str]
    final_newline: bool

    @classmethod
    def of(cls, text: str) -> _Lines:
        if not text:
            return cls([], [], False)
        parts = text.split("\n")
        final_newline = parts[-1] == ""
        if final_newline:
            parts.pop()
        keys = parts
        if "\r" in text and "\r\n" in text:  # one memchr first: most text has no CR
            keys = text.replace("\r\n", "\n").split("\n")
            if final_newline:
                keys.pop()
        return cls(parts, keys, final_newline)

    def ends_line(self, i: int) -> bool:
        return i < len(self.parts) - 1 or self.final_newline

    def text(self, i1: int, i2: int) -> str:
        """Lines i1..i2 exactly as they were, endings included."""
        if i1 >= i2:
            return ""
        body = "\n".join(self.parts[i1:i2])
        return body + "\n" if self.ends_line(i2 - 1) else body


def _eol_runs(a: _Lines, b: _Lines, i1: int, i2: int, j1: int) -> list[tuple[int, int]]:
    """Within an equal run (keys equal), the sub-runs whose lines differ in their endings."""
    differ: set[int] = set()
    if a.parts is not a.keys or b.parts is not b.keys:  # a CRLF somewhere: compare the raw lines
        differ.update(compress(count(), map(operator.ne, a.parts[i1:i2], b.parts[j1 : j1 + i2 - i1])))
    last = i2 - i1 - 1  # only the run's last pair can hold a text's last line, the one that may lack "\n"
    if a.ends_line(i1 + last) != b.ends_line(j1 + last):
        differ.add(last)
    runs: list[tuple[int, int]] = []
    for k in sorted(differ):
        if runs and runs[-1][1] == k:
            runs[-1] = (runs[-1][0], k + 1)
        else:
            runs.append((k, k + 1))
    return runs


def _text_opcodes(a: _Lines, b: _Lines) -> list[tuple[str, int, int, int, int]]:
    """Opcodes over lines with endings accounted for: ``eol`` marks a run equal but for its endings.
    It stays its own hunk even beside a real change, so a reader sees which lines truly changed."""
    split: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in opcodes(a.keys, b.keys):
        if tag != "equal":
            split.append((tag, i1, i2, j1, j2))
            continue
        at = 0
        for start, stop in _eol_runs(a, b, i1, i2, j1):
            if start > at:
                split.append(("equal", i1 + at, i1 + start, j1 + at, j1 + start))
            split.append(("eol", i1 + start, i1 + stop, j1 + start, j1 + stop))
            at = stop
        if i1 + at < i2:
            split.append(("equal", i1 + at, i2, j1 + at, j2))
    return split


def _op_name(tag: str) -> str:
    return "replace" if tag == "eol" else tag


def _text_field(name: str, before: str, after: str) -> tuple[list[dict[str, Any]], list[str]]:
    if before == after:
        return [], []
    a, b = _Lines.of(before), _Lines.of(after)
    ops = _text_opcodes(a, b)
    hunks: list[dict[str, Any]] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            continue
        hunk: dict[str, Any] = {
            "field": name,
            "op": _op_name(tag),
            "before": a.text(i1, i2),
            "after": b.text(j1, j2),
            "before_start": i1 + 1,
            "after_start": j1 + 1,
        }
        if tag == "eol":
            hunk["line_endings_only"] = True
        hunks.append(hunk)

    def render(tag: str, i1: int, i2: int, j1: int, j2: int) -> Iterable[str]:
        # Raw lines (a CRLF line keeps its CR) and GNU's no-newline marker: diff_unified stays a patch
        # that `patch` and `git apply` accept; line_endings_only lives in the JSON hunks.
        for sign, side, start, stop in (
            ((" ", a, i1, i2),) if tag == "equal" else (("-", a, i1, i2), ("+", b, j1, j2))
        ):
            yield from map(sign.__add__, side.parts[start:stop])
            if start < stop and not side.ends_line(stop - 1):  # only a text's last line can lack it
                yield NO_NEWLINE

    return hunks, _unified(name, ops, render)


NO_NEWLINE = "\\ No newline at end of file"


# --- unified rendering ------------------------------------------------------------------------------


def _range(start: int, length: int) -> str:
    """A unified hunk range as GNU diff writes it: ``l`` for one line, ``l,0`` after line l for none."""
    first = start + 1
    if length == 1:
        return str(first)
    if length == 0:
        first -= 1
    return f"{first},{length}"


def _groups(ops: Sequence[Opcode]) -> list[list[Opcode]]:
    """Changes with up to ``CONTEXT_LINES`` of context, merged where their contexts meet (as diff -u)."""
    n = CONTEXT_LINES
    changed = [k for k, op in enumerate(ops) if op[0] != "equal"]
    if not changed:
        return []
    groups: list[list[Opcode]] = []
    group: list[Opcode] = []
    for position, k in enumerate(changed):
        if not group and k > 0 and ops[k - 1][0] == "equal":  # leading context
            _, i1, i2, j1, j2 = ops[k - 1]
            take = min(n, i2 - i1)
            group.append(("equal", i2 - take, i2, j2 - take, j2))
        group.append(ops[k])
        following = changed[position + 1] if position + 1 < len(changed) else None
        if following == k + 1:
            continue  # an adjacent change: same hunk
        if k + 1 < len(ops) and ops[k + 1][0] == "equal":
            _, i1, i2, j1, j2 = ops[k + 1]
            if following is not None and following == k + 2 and i2 - i1 <= 2 * n:
                group.append(ops[k + 1])  # the gap is small: one hunk
                continue
            take = min(n, i2 - i1)
            group.append(("equal", i1, i1 + take, j1, j1 + take))
        groups.append(group)
        group = []
    return groups


def _unified(
    name: str, ops: Sequence[Opcode], render: Callable[[str, int, int, int, int], Iterable[str]]
) -> list[str]:
    lines = [f"--- a/{name}", f"+++ b/{name}"]
    for group in _groups(ops):
        i1, j1 = group[0][1], group[0][3]
        i2, j2 = group[-1][2], group[-1][4]
        lines.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@")
        for op in group:
            lines.extend(render(*op))
    return lines


def _escape(item: str) -> str:
    """One item on one line of the unified rendering (the JSON hunks keep it exact)."""
    return item.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


def _unified_items(
    name: str, ops: Sequence[Opcode], before: Sequence[str], after: Sequence[str]
) -> list[str]:
    """The unified rendering of a field of items (recipients, attachments, header lines): one escaped
    item a line."""

    def render(tag: str, i1: int, i2: int, j1: int, j2: int) -> Iterable[str]:
        if tag == "equal":
            yield from (" " + _escape(before[i]) for i in range(i1, i2))
            return
        yield from ("-" + _escape(before[i]) for i in range(i1, i2))
        yield from ("+" + _escape(after[j]) for j in range(j1, j2))

    return _unified(name, ops, render)


def _item_field(
    name: str, before: Sequence[str], after: Sequence[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Ordered items (recipients, attachments): one hunk per removed or added item."""
    if list(before) == list(after):
        return [], []
    ops = opcodes(before, after)
    hunks: list[dict[str, Any]] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            continue
        for i in range(i1, i2):
            hunks.append(
                {
                    "field": name,
                    "op": "delete",
                    "before": before[i],
                    "after": "",
                    "before_start": i + 1,
                    "after_start": j1 + 1,
                }
            )
        for j in range(j1, j2):
            hunks.append(
                {
                    "field": name,
                    "op": "insert",
                    "before": "",
                    "after": after[j],
                    "before_start": i2 + 1,
                    "after_start": j + 1,
                }
            )

    return hunks, _unified_items(name, ops, before, after)


def _header_lines(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted(headers.items(), key=lambda item: (item[0].lower(), item[0]))


def _map_field(
    name: str, before: Mapping[str, str], after: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Headers as ``Name: value`` lines sorted by name: a header is added, removed or re-valued."""
    if dict(before) == dict(after):
        return [], []
    a, b = _header_lines(before), _header_lines(after)
    ops: list[Opcode] = []
    i = j = 0
    while i < len(a) or j < len(b):
        key_a = (a[i][0].lower(), a[i][0]) if i < len(a) else None
        key_b = (b[j][0].lower(), b[j][0]) if j < len(b) else None
        if key_a is not None and key_a == key_b:
            ops.append(("equal" if a[i][1] == b[j][1] else "replace", i, i + 1, j, j + 1))
            i, j = i + 1, j + 1
        elif key_b is None or (key_a is not None and key_a < key_b):
            ops.append(("delete", i, i + 1, j, j))
            i += 1
        else:
            ops.append(("insert", i, i, j, j + 1))
            j += 1
    ops = _coalesce_equal(ops)
    text_a = [f"{k}: {v}" for k, v in a]
    text_b = [f"{k}: {v}" for k, v in b]
    hunks = [
        {
            "field": name,
            "op": tag,
            "before": text_a[i1] if i2 > i1 else "",
            "after": text_b[j1] if j2 > j1 else "",
            "before_start": i1 + 1,
            "after_start": j1 + 1,
        }
        for tag, i1, i2, j1, j2 in ops
        if tag != "equal"
    ]

    return hunks, _unified_items(name, ops, text_a, text_b)


def _coalesce_equal(ops: list[Opcode]) -> list[Opcode]:
    out: list[Opcode] = []
    for op in ops:
        if out and op[0] == "equal" and out[-1][0] == "equal":
            out[-1] = ("equal", out[-1][1], op[2], out[-1][3], op[4])
        else:
            out.append(op)
    return out


def _scalar_field(name: str, before: str, after: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A whole value: replace, or insert / delete when one side is empty."""
    if before == after:
        return [], []
    op = "insert" if not before else "delete" if not after else "replace"
    old = [before] if before else []
    new = [after] if after else []
    lines = [f"--- a/{name}", f"+++ b/{name}", f"@@ -{_range(0, len(old))} +{_range(0, len(new))} @@"]
    lines += ["-" + _escape(v) for v in old] + ["+" + _escape(v) for v in new]
    return [{"field": name, "op": op, "before": before, "after": after}], lines


def compute(before: MessageFields, after: MessageFields) -> Diff:
    """The diff of ``before`` (what the agent proposed) against ``after`` (what the reviewer sent)."""
    fields_changed: list[str] = []
    hunks: list[dict[str, Any]] = []
    unified: list[str] = []
    for name, kind in FIELDS:
        old, new = getattr(before, name), getattr(after, name)
        if kind is Kind.TEXT:
            found, lines = _text_field(name, old, new)
        elif kind is Kind.SCALAR:
            found, lines = _scalar_field(name, old, new)
        elif kind is Kind.LIST:
            found, lines = _item_field(name, old, new)
        elif kind is Kind.MAP:
            found, lines = _map_field(name, old, new)
        else:
            found, lines = _item_field(name, [x.label() for x in old], [x.label() for x in new])
        if any(not h.get("line_endings_only") for h in found):
            fields_changed.append(name)
        hunks.extend(found)
        unified.extend(lines)
    return Diff(tuple(fields_changed), tuple(hunks), "\n".join(unified) + "\n" if unified else "")
