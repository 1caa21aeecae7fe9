"""The guardrails every rule write passes (spec 001's ``skill_manage`` writes): lint, credential
scanning and the normalized text that duplicate refusal compares. Pure: no I/O."""

from __future__ import annotations

import re
import unicodedata

from reviewloop.errors import invalid

MIN_RULE_CHARS = 8
MAX_RULE_CHARS = 2000

# Text a harness leaves behind when it meant to fill something in.
_PLACEHOLDERS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"^\s*(todo|tbd|fixme|xxx+|placeholder|n/?a|none|null|undefined|rule( text)?|\.{3,}|…)\s*[.!]?\s*$",
        r"lorem ipsum",
        r"\{\{[^}]*\}\}",  # {{template}}
        r"<(insert|your|rule|placeholder|todo)[^>]*>",
        r"\[(insert|your|rule|placeholder|todo)[^\]]*\]",
        r"\bTODO\b|\bFIXME\b|\bTBD\b",
    )
]

# Shapes of secrets. A match refuses the write; the secret itself is never echoed or stored.
_CREDENTIALS: list[tuple[str, re.Pattern[str]]] = [
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("an AWS access key", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a Stripe key", re.compile(r"\b[rs]k_(live|test)_[A-Za-z0-9]{16,}")),
    ("an API key", re.compile(r"\bsk-(proj-|ant-)?[A-Za-z0-9_-]{20,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("a reviewloop key", re.compile(r"\b(rlk|rladm)_[A-Za-z0-9_-]{16,}")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("a bearer token", re.compile(r"\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*", re.IGNORECASE)),
    ("credentials in a URL", re.compile(r"[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s/@]+@", re.IGNORECASE)),
    (
        "a password or secret",
        re.compile(
            r"\b(password|passwd|pwd|passphrase|secret|api[_ -]?key|access[_ -]?token|auth[_ -]?token|"
            r"client[_ -]?secret)\b\s*(is|=|:)\s*['\"]?[^\s'\"]{6,}",
            re.IGNORECASE,
        ),
    ),
]


def normalize(text: str) -> str:
    """What duplicate refusal compares: NFKC, case-folded, whitespace collapsed, end punctuation off."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", folded).strip().rstrip(".!;:, ")


def scan_credentials(text: str) -> str | None:
    """The kind of secret ``text`` holds, or None."""
    for what, pattern in _CREDENTIALS:
        if pattern.search(text):
            return what
    return None


def check_rule_text(text: str) -> str:
    """Lint and scan ``rule_text``; returns it stripped, or raises ``bad_request`` naming the reason."""
    stripped = text.strip()
    if not stripped:
        raise invalid("/rule_text", "is empty; write the preference as one or two sentences")
    if len(stripped) > MAX_RULE_CHARS:
        raise invalid(
            "/rule_text", f"is {len(stripped)} characters; a rule is at most {MAX_RULE_CHARS}. Split it."
        )
    if len(stripped) < MIN_RULE_CHARS:
        raise invalid("/rule_text", f"is shorter than {MIN_RULE_CHARS} characters; say the whole preference")
    if any(p.search(stripped) for p in _PLACEHOLDERS):
        raise invalid(
            "/rule_text", "holds placeholder text (TODO, TBD, {{...}}, lorem ipsum); write the rule"
        )
    secret = scan_credentials(stripped)
    if secret is not None:
        raise invalid(
            "/rule_text",
            f"holds what looks like {secret}; rules are shown to every agent, so secrets never belong "
            "in one. Nothing was stored; remove the secret and save again.",
        )
    return stripped
