"""The CLI: review request flags, diff-scope packets from a real git repository, gate-stats."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest
from stack.cli import main


def test_review_request_builds_the_shared_payload_from_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["review", "request", "--runner", "codex", "--effort", "high", "--review-mode", "warm"]) == 0
    assert orjson.loads(capsys.readouterr().out) == {
        "action": "request-review",
        "runner": "codex",
        "model": "default",
        "effort": "high",
        "mode": "warm",
    }


def test_review_request_takes_a_sequence_and_names_bad_rows(capsys: pytest.CaptureFixture[str]) -> None:
    sequence = [
        {"runner": "codex", "mode": "cold"},
        {"runner": "claude", "model": "opus", "effort": "max", "mode": "warm"},
    ]
    assert main(["review", "request", "--review-sequence", orjson.dumps(sequence).decode()]) == 0
    payload = orjson.loads(capsys.readouterr().out)
    assert payload["runner"] == "codex" and payload["sequence"] == [sequence[1]]
    bad = orjson.dumps([{"runner": "same", "mode": "cold"}, {"runner": "x", "mode": "hot"}]).decode()
    assert main(["review", "request", "--review-sequence", bad]) == 2
    err = capsys.readouterr().err
    assert "/sequence/0/runner" in err and "/sequence/1/mode" in err
    assert main(["review", "request", "--runner", "codex"]) == 2  # the mode is never implied
    assert main(["review", "request", "--review-sequence", "[nope"]) == 2


def _git(repo: Path, *argv: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *argv], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_diff_scope_packet_lists_changed_and_sensitive_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "README.md").write_text("hi\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("x = 1\n")
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "ci.yml").write_text("on: push\n")
    (repo / "src" / "auth.py").write_text("y = 2\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "change")
    before = _git(repo, "status", "--porcelain")
    assert main(["review", "diff-scope", "packet", str(repo), base, "HEAD"]) == 0
    out = capsys.readouterr().out
    assert "Minimal-diff policy" in out and "Changed paths (3)" in out
    assert "Sensitive-path candidates (2)" in out
    assert ".github/workflows/ci.yml" in out and "src/auth.py  [*auth*]" in out
    assert _git(repo, "status", "--porcelain") == before  # read-only
    assert main(["review", "diff-scope"]) == 0 and "packet <repository>" in capsys.readouterr().out
    assert main(["review", "diff-scope", "packet", str(repo), "nope", "HEAD"]) == 2


def test_gate_stats_summarizes_a_decision_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def record(decision: str, source: str, reason: str, **extra: object) -> dict[str, object]:
        return {
            "at": "2026-10-28T15:48:45.785Z",
            "session": "s",
            "turn": 4,
            "decision": decision,
            "source": source,
            "reason": reason,
            "toolCalls": 3,
            "latencyMs": extra.pop("latency", 0),
            "threshold": 0.75,
            **extra,
        }

    log = tmp_path / "gates.jsonl"
    lines = [
        record("skip", "classifier", "no (confidence 0.92)", choice="no", confidence=0.92, latency=240),
        record("review", "classifier", "no (confidence 0.60)", choice="no", confidence=0.6, latency=180),
        record("review", "classifier", "yes (confidence 0.90)", choice="yes", confidence=0.9, latency=300),
        record("review", "counters", "fallback: timeout"),
        record("review", "counters", "fallback: timeout"),
        record("review", "counters", "fallback: circuit open"),
    ]
    log.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines) + b"not json\n")
    assert main(["gate-stats", str(log)]) == 0
    out = capsys.readouterr().out
    assert "decisions: 6" in out and "skip" in out and "16.7%" in out
    assert "timeout" in out and "circuit open" in out
    assert "p50 240" in out and "max 300" in out
    lines_out = out.splitlines()
    table = {
        float(line.split()[0]): int(line.split()[1])
        for line in lines_out[lines_out.index("confidentNo  would skip") + 1 :]
    }
    assert table[0.5] == 2 and table[0.75] == 1 and table[0.95] == 0
    assert main(["gate-stats", str(tmp_path / "missing.jsonl")]) == 2
