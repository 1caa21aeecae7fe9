"""`make lint` keeps the architecture true: each guard rail is shown failing on the fault it exists for.

Each test copies the tree it checks to a scratch folder, plants one fault, and runs the same tool with the
same configuration `make lint` uses.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUF = ROOT / ".tools" / "node_modules" / ".bin" / "buf"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _tree(tmp_path: Path) -> Path:
    copy = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "migrations", "*.pyi")
    for part in ("libs", "services"):
        shutil.copytree(ROOT / part, copy / part, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    # The allow-list contract type lives beside these tests (pyproject.toml's contract_types).
    (copy / "tests" / "contract").mkdir(parents=True)
    for name in ("__init__.py", "contract/__init__.py", "contract/allowlist.py"):
        shutil.copy(ROOT / "tests" / name, copy / "tests" / name)
    return copy


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (tree, tree / "libs", tree / "services")))}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold_on_the_tree_as_it_is(tmp_path: Path) -> None:
    result = _lint_imports(_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("path", "source", "reported"),
    [
        ("services/nudge/domain/leak.py", "import grpc\n", "nudge.domain.leak -> grpc"),
        (
            "services/rules/domain/leak.py",
            "from reviewloop.storage import utcnow\n",
            "rules.domain.leak -> reviewloop.storage",
        ),
        # The allow-list: a library no contract ever forbade is refused too, until pyproject.toml lists it.
        (
            "services/dispatch_budget/domain/leak.py",
            "import limits\n",
            "dispatch_budget.domain.leak -> limits",
        ),
        ("libs/reviewloop/leak.py", "import review_state.store\n", "reviewloop.leak -> review_state.store"),
        ("services/review_state/leak.py", "from rules import store\n", "review_state.leak -> rules"),
        ("services/gateway/leak.py", "from stack import cli\n", "gateway.leak -> stack"),
    ],
    ids=[
        "domain-imports-grpc",
        "domain-imports-storage",
        "domain-imports-an-unlisted-library",
        "libs-import-a-service",
        "context-imports-context",
        "service-imports-the-composition-root",
    ],
)
def test_an_import_against_the_arrows_fails_lint(
    tmp_path: Path, path: str, source: str, reported: str
) -> None:
    tree = _tree(tmp_path)
    (tree / path).write_text(source)
    result = _lint_imports(tree)
    assert result.returncode != 0
    assert reported in result.stdout


def _breaking(tmp_path: Path, edit: tuple[str, str]) -> subprocess.CompletedProcess[str]:
    if not BUF.exists():
        pytest.skip("buf is installed by `make test` / `make lint` (npm @bufbuild/buf)")
    before, after = tmp_path / "before", tmp_path / "after"
    shutil.copytree(ROOT / "proto", before)
    shutil.copytree(ROOT / "proto", after)
    target = after / "reviewloop" / "review" / "v1" / "review.proto"
    text = target.read_text()
    assert re.search(edit[0], text, flags=re.M), edit[0]
    target.write_text(re.sub(edit[0], edit[1], text, count=1, flags=re.M))
    # The rule set of buf.yaml, whose module path names the repository's proto/ folder.
    rules = re.search(r"^breaking:\n  use:\n(?:    #.*\n)*    - (\w+)", (ROOT / "buf.yaml").read_text(), re.M)
    assert rules is not None
    config = f'{{"version":"v2","breaking":{{"use":["{rules[1]}"]}}}}'
    return subprocess.run(
        [str(BUF), "breaking", str(after), "--against", str(before), "--config", config],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_removing_a_proto_field_fails_lint(tmp_path: Path) -> None:
    result = _breaking(tmp_path, (r"^  string review_id = 2;\n", ""))
    assert result.returncode != 0
    assert "deleted" in result.stdout + result.stderr


def test_renumbering_a_proto_field_fails_lint(tmp_path: Path) -> None:
    result = _breaking(tmp_path, (r"^  string review_id = 2;", "  string review_id = 99;"))
    assert result.returncode != 0


def test_an_unchanged_contract_passes_the_breaking_check(tmp_path: Path) -> None:
    result = _breaking(tmp_path, (r"^(syntax)", r"\1"))
    assert result.returncode == 0, result.stdout + result.stderr
