"""The shared minimal-diff policy and sensitive-path candidates (spec 003 "Diff scope"). Pure: the
CLI feeds it the changed paths it read from git."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Any

POLICY = """Minimal-diff policy (review-diff-scope)
- Change only what the frozen ticket asks for; every changed path must trace to it.
- No drive-by refactors, renames, reformatting or dependency bumps outside the ticket's scope.
- Tests and docs that cover the change belong to it; unrelated test churn does not.
- Every verdict includes its Diff scope table: path, why it changed, in scope (yes/no).
- A WARM review narrows correctness review to the saved delta; its scope inventory still covers the
  whole contribution against the publication base.
The scanner lists sensitive-path candidates only: it grants no exception, and it does not detect
semantic refactors or formatting churn. It changes no source, review result or publication authority."""

INSTRUCTIONS = """Usage: reviewloop review diff-scope packet <repository> <publication-base> <head>
prints this policy, the paths changed between <publication-base> and <head>, and the sensitive-path
candidates that require review against the frozen ticket."""

# Paths whose change needs an explicit look against the ticket.
SENSITIVE_PATTERNS = (
    ".github/*",
    ".gitlab-ci.yml",
    "*Dockerfile*",
    "deploy/*",
    "infra/*",
    "*.tf",
    "*/migrations/*",
    "migrations/*",
    "*.lock",
    "package.json",
    "pyproject.toml",
    "requirements*.txt",
    "go.mod",
    "Cargo.toml",
    "*auth*",
    "*secret*",
    "*credential*",
    "*.pem",
    "*.key",
    ".env*",
    "CODEOWNERS",
    "*/CODEOWNERS",
    "Makefile",
    "*.proto",
)


def sensitive_candidates(paths: list[str]) -> list[tuple[str, str]]:
    """(path, the first pattern it matched) for every changed path that looks sensitive."""
    found = []
    for path in paths:
        for pattern in SENSITIVE_PATTERNS:
            if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern):
                found.append((path, pattern))
                break
    return found


# --- the Diff scope table a verdict carries (spec 003 "Every verdict includes its Diff scope table") ---

MAX_SCOPE_ROWS = 5000
_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


class ScopeTableRefused(ValueError):
    """A verdict's Diff scope table this service cannot accept; the message says why."""


def check_scope_table(raw: Any, reviewed_head: str) -> dict[str, Any]:
    """A verdict's Diff scope table, normalized: ``{base, head, rows: [{path, why, in_scope}]}``.
    ``base`` is the publication base the inventory covers (for a WARM review too: its correctness
    review narrows to the saved delta, its scope inventory does not); ``head`` is the reviewed head."""
    if not isinstance(raw, Mapping):
        raise ScopeTableRefused("a Diff scope table is an object {base, head, rows}")
    base, head, rows = raw.get("base"), raw.get("head"), raw.get("rows")
    if not isinstance(base, str) or not _SHA.match(base):
        raise ScopeTableRefused("base: the full publication-base SHA the inventory covers")
    if head != reviewed_head:
        raise ScopeTableRefused(f"head: the table must cover the reviewed head {reviewed_head}")
    if not isinstance(rows, list) or len(rows) > MAX_SCOPE_ROWS:
        raise ScopeTableRefused(f"rows: a list of at most {MAX_SCOPE_ROWS} {{path, why, in_scope}}")
    table = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ScopeTableRefused(f"rows/{i}: an object {{path, why, in_scope}}")
        path, why, in_scope = row.get("path"), row.get("why"), row.get("in_scope")
        if not isinstance(path, str) or not 0 < len(path) <= 1000:
            raise ScopeTableRefused(f"rows/{i}/path: the changed path")
        if not isinstance(why, str) or len(why) > 2000:
            raise ScopeTableRefused(f"rows/{i}/why: why it changed (text)")
        if not isinstance(in_scope, bool):
            raise ScopeTableRefused(f"rows/{i}/in_scope: true or false")
        table.append({"path": path, "why": why, "in_scope": in_scope})
    return {"base": base, "head": head, "rows": table}


def scope_refusal(table: Mapping[str, Any] | None, publication_base: str) -> str | None:
    """Why a passing verdict's stored table does not stand, or None: it is missing or was refused
    at settlement, or it does not cover the whole contribution from the publication base."""
    if table is None:
        return "its verdict carries no Diff scope table"
    if "refused" in table:
        return f"its Diff scope table was refused: {table['refused']}"
    if publication_base and table.get("base") != publication_base:
        return (
            f"its Diff scope table covers {table.get('base')}..{table.get('head')}, not the whole "
            f"contribution from the publication base {publication_base}"
        )
    return None
