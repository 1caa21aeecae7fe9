"""The docs name only settings the code reads, each with one default (issue 34: ``REVIEWLOOP_RECONCILE_AFTER_S``
was documented and read by nothing, ``REVIEWLOOP_RECONCILE_SWEEP_S`` had two defaults in the README)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE_DIRS = ("libs", "services", "tests", "deploy")
NAME = re.compile(r"\bREVIEWLOOP_[A-Z0-9_]*[A-Z0-9]\b")
# dispatch_budget reads every spec-001 gate setting under one prefix (services/dispatch_budget/bootstrap.py).
PREFIXED = ("REVIEWLOOP_REVIEW_", ROOT / "services" / "dispatch_budget" / "bootstrap.py")


def _code() -> str:
    here = Path(__file__).resolve()
    texts = []
    for directory in CODE_DIRS:
        for path in (ROOT / directory).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".yaml", ".yml", ".env", ".toml") and path != here:
                texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


def test_every_setting_the_docs_name_is_read_by_the_code() -> None:
    code = _code()
    prefix, reader = PREFIXED
    prefixed = reader.read_text()
    unread = set()
    for doc in DOCS:
        for name in set(NAME.findall(doc.read_text())):
            if name in code:
                continue
            if name.startswith(prefix) and f'"{name.removeprefix(prefix)}"' in prefixed:
                continue
            unread.add((doc.name, name))
    assert not unread, f"documented, read by nothing: {sorted(unread)}"


def test_the_configuration_tables_give_each_setting_one_row() -> None:
    rows: dict[str, int] = {}
    for line in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        if line.startswith("| `REVIEWLOOP_"):
            for name in set(NAME.findall(line.split("|")[1])):
                rows[name] = rows.get(name, 0) + 1
    assert {name for name, count in rows.items() if count > 1} == set()


def test_the_sdk_conformance_page_walks_every_top_20_finding_once_and_no_merge_leftovers() -> None:
    page = (ROOT / "docs" / "sdk-conformance.md").read_text()
    assert not re.search(r"^(<<<<<<<|=======|>>>>>>>)", page, re.MULTILINE)
    top = page[page.index("## Top 20") : page.index("## Also noted")]
    numbers = [int(n) for n in re.findall(r"^\| (\d+) \|", top, re.MULTILINE)]
    assert numbers == list(range(1, 21))
    # Every line of the table is a row of it (a merge once left a list item between rows 14 and 19).
    table = [line for line in top.splitlines() if line and not line.startswith("#")][1:]
    assert all(line.startswith("|") for line in table if not line.startswith(("Spec", "The proof")))
