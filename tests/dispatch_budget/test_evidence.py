"""spec 002: the evidence_status decoder over a table of payloads, and the payload sanitizer."""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import Any

import orjson
import pytest
from dispatch_budget.domain.evidence import (
    EvidenceStatus,
    evidence_rejected,
    evidence_status,
    sanitize_payload,
)
from dispatch_budget.store.journals import encode_line
from hypothesis import given, settings
from hypothesis import strategies as st

A, R, AB, U = EvidenceStatus.ACCEPTED, EvidenceStatus.REJECTED, EvidenceStatus.ABSENT, EvidenceStatus.UNKNOWN


class Atom(Enum):
    """An atom-like marker, as a live in-memory producer would stamp it."""

    accepted = 1
    rejected = 2
    absent = 3


class Key(StrEnum):
    EVIDENCE = "evidence"
    REFS = "refs"


REJECTED_DETAIL = {"refs": [3], "reason": "stale_evidence", "ref": 3}

TABLE: list[tuple[str, Any, EvidenceStatus]] = [
    # The marker is authoritative, whatever else the record carries.
    ("accepted with refs", {"usage": {}, "final": True, "evidence": "accepted", "refs": [2]}, A),
    ("rejected", {"final": True, "evidence": "rejected", "evidence_rejected": REJECTED_DETAIL}, R),
    ("absent", {"final": True, "evidence": "absent"}, AB),
    ("rejected although refs present", {"final": True, "evidence": "rejected", "refs": [2]}, R),
    ("absent wins over refs", {"evidence": "absent", "refs": [2]}, AB),
    # Grandfather rule for legacy records (no marker key).
    ("legacy with refs", {"usage": {}, "final": True, "refs": [2]}, A),
    ("legacy with empty refs", {"final": True, "refs": []}, A),
    ("legacy with neither is never absent", {"usage": {}, "final": True}, U),
    ("empty payload", {}, U),
    # Unrecognized values fail safe to unknown, never accepted.
    ("future enum value", {"evidence": "verified", "refs": [2]}, U),
    ("forged capitalized", {"evidence": "ACCEPTED"}, U),
    ("forged padded", {"evidence": " accepted"}, U),
    ("decode-only bucket is not a wire value", {"evidence": "unknown"}, U),
    ("null marker", {"evidence": None, "refs": [2]}, U),
    ("boolean marker", {"evidence": True}, U),
    ("integer marker", {"evidence": 1}, U),
    ("list marker", {"evidence": ["accepted"]}, U),
    ("map marker", {"evidence": {"status": "accepted"}}, U),
    # Atom-like and string keys and values alike.
    ("atom value", {"evidence": Atom.accepted}, A),
    ("atom value rejected", {"evidence": Atom.rejected}, R),
    # A JSON string is the wire value exactly: a forged ":accepted" is never accepted.
    ("colon string value is forged", {"evidence": ":absent"}, U),
    ("colon accepted is forged", {"evidence": ":accepted", "refs": [3]}, U),
    ("enum key", {Key.EVIDENCE: "accepted"}, A),
    ("colon atom key", {":evidence": "rejected"}, R),
    ("bytes key and value", {b"evidence": b"accepted"}, A),
    ("atom refs key (legacy)", {Key.REFS: ["i1"]}, A),
    ("colon refs key (legacy)", {":refs": ["i1"], ":final": True}, A),
    # Not a map at all.
    ("none", None, U),
    ("list", [("evidence", "accepted")], U),
    ("string", "accepted", U),
]


@pytest.mark.parametrize(("payload", "expected"), [(p, e) for _, p, e in TABLE], ids=[n for n, _, _ in TABLE])
def test_evidence_status_decodes_the_table(payload: Any, expected: EvidenceStatus) -> None:
    assert evidence_status(payload) is expected


def test_the_rejection_detail_is_read_only_for_rejected_records() -> None:
    assert (
        evidence_rejected({"evidence": "rejected", "evidence_rejected": REJECTED_DETAIL}) == REJECTED_DETAIL
    )
    assert evidence_rejected({"evidence": "accepted", "evidence_rejected": REJECTED_DETAIL}) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.text(alphabet="abcfinal", max_size=10) | st.sampled_from(["evidence", "refs"]),
        json_values,
        max_size=5,
    )
)
def test_the_decoder_is_total_and_never_blesses_a_value_it_does_not_know(payload: dict[str, Any]) -> None:
    status = evidence_status(payload)
    if "evidence" in payload:
        if status is A:
            assert payload["evidence"] in ("accepted", ":accepted", b"accepted", b":accepted")
    else:
        assert status is (A if "refs" in payload else U)
    encode_line({"payload": payload})  # the sanitizer never crashes on what a producer may hand it


def test_non_encodable_terms_become_text_instead_of_crashing() -> None:
    class Pid:
        def __repr__(self) -> str:
            return "#PID<0.42.0>"

    payload = {
        "tuple": ("ok", 1),
        "pid": Pid(),
        "nan": float("nan"),
        "set": {3},
        (1, 2): "tuple key",
        "huge": 2**70,
        "bytes": b"\xff\xfe",
    }
    clean = sanitize_payload(payload)
    line = encode_line({"payload": payload})
    assert line.endswith(b"\n") and orjson.loads(line)["payload"] == clean
    assert clean["pid"] == "#PID<0.42.0>" and clean["tuple"] == ["ok", 1] and clean["nan"] == "nan"
    assert clean["(1, 2)"] == "tuple key" and clean["huge"] == str(2**70)
