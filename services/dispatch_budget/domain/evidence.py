"""Spec 002's event envelope and the evidence tri-state decoder with its grandfather rule. Pure.

``evidence_status`` is a decode, not a re-derivation: it reports the marker the producer stamped on a
``turn_completed{final: true}`` payload and never re-runs the done gate. It trusts the journal
(append-only, single writer); what it defends is that a marker it cannot understand fails safe to
``unknown``, never ``accepted``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = "1.1.0"  # the first journal schema that carries the evidence marker
ENVELOPE_VERSION = 0

EVENT_TYPES = frozenset(
    {"turn_started", "item_started", "item_delta", "item_completed", "turn_completed", "error"}
)
EPHEMERAL_TYPES = frozenset({"item_delta"})  # live render only, never journaled or replayed
FAMILIES = frozenset({"loop", "meta"})
REJECTION_REASONS = frozenset(
    {"missing_ref", "not_evidence", "foreign_turn", "stale_evidence", "mutation_echo"}
)


class EvidenceStatus(StrEnum):
    """The quaternary decode: the wire marker is tri-state, ``unknown`` is the decode-only bucket."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    ABSENT = "absent"
    UNKNOWN = "unknown"


_WIRE = {EvidenceStatus.ACCEPTED, EvidenceStatus.REJECTED, EvidenceStatus.ABSENT}


def _key_text(key: Any, atom_prefix: bool = True) -> str | None:
    """A key as text: ``"evidence"``, ``b"evidence"`` or an atom-like ``:evidence`` all read alike.
    Without ``atom_prefix`` a leading ``:`` is kept: a JSON string is never an atom."""
    if isinstance(key, bytes):
        try:
            key = key.decode()
        except UnicodeDecodeError:
            return None
    if isinstance(key, StrEnum):
        key = key.value
    if not isinstance(key, str):
        name = getattr(key, "name", None)  # an Enum member used as an atom
        if not isinstance(name, str):
            return None
        key = name
    text: str = key
    return text.removeprefix(":") if atom_prefix else text


def _lookup(payload: Mapping[Any, Any], name: str) -> tuple[bool, Any]:
    for key, value in payload.items():
        if _key_text(key) == name:
            return True, value
    return False, None


def normalize_evidence(value: Any) -> EvidenceStatus:
    """A stamped marker value as an enum; anything unrecognized (a future value, a forged string, a
    garbage type) is ``unknown``, never ``accepted``.
    """
    # An atom value arrives as an enum member; a string is the wire value exactly, so a forged
    # ":accepted" is unknown, never accepted.
    text = _key_text(value, atom_prefix=False) if not isinstance(value, bool) else None
    if text is None:
        return EvidenceStatus.UNKNOWN
    try:
        status = EvidenceStatus(text)
    except ValueError:
        return EvidenceStatus.UNKNOWN
    return status if status in _WIRE else EvidenceStatus.UNKNOWN


def evidence_status(payload: Any) -> EvidenceStatus:
    """Decode a final ``turn_completed`` payload's evidence status (total: never raises).

    An ``evidence`` key present is authoritative. A legacy record (no key) with ``refs`` present
    grandfathers to ``accepted``; a legacy record with neither is ``unknown``, never ``absent``
    (that would launder a historical rejection into a false "never offered" claim).
    """
    if not isinstance(payload, Mapping):
        return EvidenceStatus.UNKNOWN
    has_marker, marker = _lookup(payload, "evidence")
    if has_marker:
        return normalize_evidence(marker)
    has_refs, _ = _lookup(payload, "refs")
    return EvidenceStatus.ACCEPTED if has_refs else EvidenceStatus.UNKNOWN


def evidence_rejected(payload: Any) -> dict[str, Any] | None:
    """The ``evidence_rejected`` detail of a rejected record, sanitized, or None."""
    if not isinstance(payload, Mapping) or evidence_status(payload) is not EvidenceStatus.REJECTED:
        return None
    found, detail = _lookup(payload, "evidence_rejected")
    if not found or not isinstance(detail, Mapping):
        return None
    return sanitize_payload(detail)


def _sanitize(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
            return str(value)  # JSON readers lose precision past 64 bits
        if isinstance(value, float) and not math.isfinite(value):
            return repr(value)
        return value
    if depth > 32:
        return repr(value)
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, Mapping):
        return {_sanitize_key(k): _sanitize(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_sanitize(v, depth + 1) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return repr(value)
    return repr(value)


def _sanitize_key(key: Any) -> str:
    text = _key_text(key)
    return text if text is not None and isinstance(key, str | bytes | StrEnum) else str(key)


def sanitize_payload(payload: Mapping[Any, Any]) -> dict[str, Any]:
    """Coerce a payload into a JSON-encodable dict: a term JSON cannot carry (an object, a tuple
    key, a NaN) becomes its text instead of crashing the journal append.
    """
    result = _sanitize(payload, 0)
    return result if isinstance(result, dict) else {"value": result}
