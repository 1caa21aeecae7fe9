"""The shared minimal-diff policy and sensitive-path candidates (spec 003 "Diff scope"). Pure: the
CLI feeds it the changed paths it read from git."""

from __future__ import annotations

import fnmatch

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
