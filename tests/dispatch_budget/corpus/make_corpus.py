"""Writes the spec 002 corpus beside this file, in the producer's format (spec 002, NOTES.md): one JSON
object per line with the ten keys; ids are journal offsets from 1 and refs are integer offsets.

- ``v1_0_0.jsonl``: records at 1.0.0, no evidence marker (the closing turn's refs grandfather to accepted);
- ``v1_1_0.jsonl``: the marker (a rejected done naming the offending offset), a null turn_id, the
  producer's approval events this reader does not know, U+2028/U+2029/U+0085 inside strings;
- ``v1_2_0.jsonl``: hash-chained from the all-zero genesis, with scope, provenance, actor, branch_id;
- ``v1_2_0_tampered.jsonl``: the same chain with record 3's payload edited after it was hashed.

Run it to regenerate: ``.venv/bin/python tests/dispatch_budget/corpus/make_corpus.py``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
T0 = 1_764_720_000_000_000  # microseconds since the epoch


def canonical(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def envelope(
    offset: int, turn: str | None, kind: str, payload: dict[str, Any], version: str, **extra: Any
) -> dict[str, Any]:
    # The producer's key order (not sorted): the reader must not care.
    return {
        "v": 0,
        "id": offset,
        "session_id": "ses_corpus",
        "turn_id": turn,
        "ts": T0 + offset * 1000,
        "family": "meta" if kind.startswith("approval") else "loop",
        "type": kind,
        "tier": "durable",
        "payload": payload,
        "schema_version": version,
        **extra,
    }


def review_turn(version: str, closing: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        envelope(1, "t1", "turn_started", {"prompt": "review PR 7"}, version),
        envelope(
            2,
            "t1",
            "item_completed",
            {
                "item_id": "i1",
                "item_type": "tool_use",
                "name": "read_diff",
                "arguments": {"path": "a.py"},
                "call_id": "c1",
            },
            version,
        ),
        envelope(
            3,
            "t1",
            "item_completed",
            {"item_id": "i2", "item_type": "tool_result", "name": "read_diff", "result": "+print('hi')"},
            version,
        ),
        envelope(
            4,
            "t1",
            "item_completed",
            {"item_id": "i3", "item_type": "message", "content": "One issue."},
            version,
        ),
        envelope(
            5,
            "t1",
            "turn_completed",
            {"usage": {"input_tokens": 812, "output_tokens": 64}, "iteration": 1, "final": True, **closing},
            version,
        ),
    ]


def write(name: str, records: list[dict[str, Any]], chained: bool = False) -> None:
    lines = [
        canonical(r) if chained else json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records
    ]
    (HERE / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def chain(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    prev = "0" * 64
    out = []
    for record in records:
        linked = {**record, "prev_hash": prev}
        linked["hash"] = hashlib.sha256(canonical(linked).encode()).hexdigest()
        prev = linked["hash"]
        out.append(linked)
    return out


def main() -> None:
    write("v1_0_0.jsonl", review_turn("1.0.0", {"refs": [3], "verdict": "issues", "reviewed_head": "c" * 40}))
    v11 = review_turn(
        "1.1.0",
        {"evidence": "rejected", "evidence_rejected": {"refs": [2], "reason": "not_evidence", "ref": 2}},
    )
    v11[3]["payload"]["content"] = "line\u2028separator, paragraph\u2029and next-line\u0085inside a string"
    v11 += [
        envelope(6, None, "approval_requested", {"approval_id": "ap1", "tool": "write_file"}, "1.1.0"),
        envelope(7, None, "approval_decided", {"approval_id": "ap1", "decision": "approved"}, "1.1.0"),
    ]
    write("v1_1_0.jsonl", v11)
    newer = {
        "scope": "session",
        "provenance": {"source": "reviewer", "trust": "trusted"},
        "actor": {"kind": "agent", "id": "agt_reviewer"},
        "branch_id": "main",
    }
    v12 = [
        {**r, **newer}
        for r in review_turn(
            "1.2.0",
            {"evidence": "accepted", "refs": [3], "verdict": "pass", "reviewed_head": "c" * 40},
        )
    ]
    chained = chain(v12)
    write("v1_2_0.jsonl", chained, chained=True)
    tampered = [dict(r) for r in chained]
    tampered[2] = {**tampered[2], "payload": {**tampered[2]["payload"], "result": "+print('bye')"}}
    write("v1_2_0_tampered.jsonl", tampered, chained=True)


if __name__ == "__main__":
    main()
