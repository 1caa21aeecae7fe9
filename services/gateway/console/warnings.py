"""What a human cannot see in rendered mail: the review page's warning panel. Pure functions of a review
(as ``gateway.translate.reviews.as_review`` answers it)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

ZERO_WIDTH = {"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e"}
BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}
# CSS that hides text from the reader while a mail client still delivers it.
_HIDDEN_CSS = re.compile(
    r"display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0(?![.\d]*[1-9])|opacity\s*:\s*0(?![.\d]*[1-9])"
    r"|max-height\s*:\s*0(?![.\d]*[1-9])|\bhidden\b(?=[^>]*>)",
    re.IGNORECASE,
)
# Glyphs and pairs a reader takes for another letter (a small skeleton in the spirit of UTS #39).
_CONFUSABLE_PAIRS = (("rn", "m"), ("vv", "w"), ("cl", "d"))
_CONFUSABLE_CHARS = str.maketrans({"0": "o", "1": "l", "I": "l", "|": "l", "5": "s"})


def _name(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}"


def invisible_characters(field: str, text: str) -> list[str]:
    """Zero-width and bidi controls in ``text``, named with their position."""
    found = []
    for index, char in enumerate(text):
        if char in ZERO_WIDTH:
            found.append(f"{field}: zero-width character {_name(char)} at position {index}")
        elif char in BIDI:
            found.append(f"{field}: bidi control {_name(char)} at position {index}")
    return found


def skeleton(domain: str) -> str:
    """The domain as a reader would read it: case-folded, confusable glyphs and pairs mapped."""
    text = unicodedata.normalize("NFKC", domain).translate(_CONFUSABLE_CHARS).casefold()
    for pair, single in _CONFUSABLE_PAIRS:
        text = text.replace(pair, single)
    return text


def lookalike_domains(addresses: list[str], known: list[str]) -> list[str]:
    """Recipient domains that read like another domain of the draft (or a known one) but are not it,
    and domains spelled in punycode or outside ASCII."""
    domains = sorted({a.rpartition("@")[2].lower() for a in addresses if "@" in a})
    reference = sorted(set(domains) | {d.lower() for d in known})
    found = []
    for domain in domains:
        if domain.startswith("xn--") or ".xn--" in domain or not domain.isascii():
            found.append(f"recipient domain {domain} is an internationalized (punycode) name")
        twins = [o for o in reference if o != domain and skeleton(o) == skeleton(domain)]
        if twins:
            found.append(f"recipient domain {domain} looks like {', '.join(twins)}")
    return found


def hidden_html(body_html: str | None) -> list[str]:
    if not body_html:
        return []
    hits = {m.group(0).lower() for m in _HIDDEN_CSS.finditer(body_html)}
    return [f"HTML part hides text ({', '.join(sorted(hits))})"] if hits else []


def added_recipients(review: dict[str, Any]) -> list[str]:
    """Recipients the latest revision added to the one before it (from its revision turn's diff)."""
    turns = [t for t in review.get("turns") or [] if t["turn_type"] == "revision" and t.get("diff_json")]
    if not turns:
        return []
    added = []
    for hunk in turns[-1]["diff_json"]["hunks"]:
        if hunk["field"] in ("to", "cc", "bcc"):
            before = set(hunk["before"] or []) if isinstance(hunk["before"], list) else set()
            after = hunk["after"] if isinstance(hunk["after"], list) else []
            added += [f"{hunk['field']}: {a} added since the last revision" for a in after if a not in before]
    return added


def warnings(review: dict[str, Any], known_domains: Sequence[str] = ()) -> list[str]:
    """Every warning for ``review``, most alarming first."""
    recipients = [*review["to"], *review["cc"], *review["bcc"]]
    found = []
    for field in ("subject", "body_text", "body_html"):
        found += invisible_characters(field, review.get(field) or "")
    for address in recipients:
        found += invisible_characters("recipient", address)
    found += lookalike_domains(recipients, list(known_domains))
    found += hidden_html(review.get("body_html"))
    found += added_recipients(review)
    return found
