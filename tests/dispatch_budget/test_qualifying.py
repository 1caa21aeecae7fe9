"""The publication gate's count (domain.qualifying), pure: what a passing review must prove, and the
property that no sequence of attempts, retries, rechecks and forged journal lines makes the gate count
more passing reviews than distinct bound sessions with accepted evidence for the current head."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dispatch_budget.domain.budget import AttemptKind
from dispatch_budget.domain.gatestats import summarize
from dispatch_budget.domain.journal import JournalRecord
from dispatch_budget.domain.qualifying import Attempt, Row, SessionFacts, rows_of, tally
from dispatch_budget.domain.rounds import (
    journal_settlement,
    reported_settlement,
    settlement_to_write,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from reviewloop.errors import DomainError

BASE, HEAD, OTHER = "0" * 40, "1" * 40, "2" * 40
REPO, PR = "acme/web", 7
SESSIONS = {
    "rvs_a": SessionFacts("rvs_a", REPO, PR, "codex", "gpt-5", "high", "cold", BASE),
    "rvs_b": SessionFacts("rvs_b", REPO, PR, "codex", "gpt-5-mini", "low", "cold", BASE),
    "rvs_w": SessionFacts("rvs_w", REPO, PR, "codex", "gpt-5", "high", "warm", BASE),
    "rvs_x": SessionFacts("rvs_x", "other/repo", 1, "codex", "gpt-5", "high", "cold", BASE),
}
ROW1 = {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "cold"}
ROW2 = {"runner": "codex", "model": "gpt-5-mini", "effort": "low", "mode": "cold"}


def scope(head: str = HEAD, base: str = BASE) -> dict[str, Any]:
    return {"base": base, "head": head, "rows": [{"path": "a.py", "why": "the fix", "in_scope": True}]}


def closing(**payload: Any) -> JournalRecord:
    return JournalRecord("s", "t1", 1, "loop", "turn_completed", {"final": True, **payload}, id=1)


def settled(
    receipt_id: str,
    final: JournalRecord | None,
    session: str = "rvs_a",
    kind: AttemptKind = AttemptKind.INITIAL,
    journal: str = "",
) -> Attempt:
    s = journal_settlement(final, HEAD, journal or f"j-{receipt_id}")
    return Attempt(
        receipt_id,
        kind,
        HEAD,
        s.outcome.value,
        s.verdict,
        s.reason,
        s.evidence,
        s.reviewed_head,
        session,
        s.journal_run_id,
        s.diff_scope,
    )


def count(*attempts: Attempt, rows: list[Row] | None = None) -> Any:
    return tally(HEAD, rows or rows_of([], 1), list(attempts), SESSIONS, repository=REPO, pr_number=PR)


ACCEPTED = {
    "evidence": "accepted",
    "refs": [1],
    "verdict": "pass",
    "reviewed_head": HEAD,
    "diff_scope": scope(),
}


def test_only_accepted_evidence_for_the_head_in_a_bound_session_qualifies() -> None:
    assert count(settled("r1", closing(**ACCEPTED))).qualifying == 1
    cases = {
        "forged": closing(**{**ACCEPTED, "evidence": "ACCEPTED"}),
        "atom-like": closing(**{**ACCEPTED, "evidence": ":accepted"}),
        "future": closing(**{**ACCEPTED, "evidence": "verified"}),
        "legacy-neither": closing(verdict="pass", reviewed_head=HEAD, diff_scope=scope()),
        "other-head": closing(**{**ACCEPTED, "reviewed_head": OTHER}),
        "rejected": closing(**{**ACCEPTED, "evidence": "rejected"}),
        "no-scope": closing(**{k: v for k, v in ACCEPTED.items() if k != "diff_scope"}),
        "delta-scope": closing(**{**ACCEPTED, "diff_scope": scope(base=OTHER)}),
    }
    for name, final in cases.items():
        result = count(settled(name, final))
        assert result.qualifying == 0, name
        assert [r.receipt_id for r in result.refused] == [name]
    reasons = {name: count(settled(name, final)).refused[0].reason for name, final in cases.items()}
    assert "evidence unknown" in reasons["forged"] and "evidence unknown" in reasons["legacy-neither"]
    assert OTHER in reasons["other-head"] and "Diff scope" in reasons["no-scope"]
    assert "whole contribution" in reasons["delta-scope"]
    # Unknown evidence spends the round (fail closed) but records no verdict: it is never guessed.
    unknown = journal_settlement(cases["forged"], HEAD)
    assert (unknown.outcome.value, unknown.verdict, unknown.evidence) == ("counted", None, "unknown")


def test_a_session_never_bound_or_named_or_of_another_pr_proves_nothing() -> None:
    for session, why in (
        ("", "names no reviewer session"),
        ("rvs_fake", "never bound"),
        ("rvs_x", "another"),
    ):
        result = count(settled("r", closing(**ACCEPTED), session=session))
        assert result.qualifying == 0 and why in result.refused[0].reason


def test_a_reported_verdict_spends_its_round_but_is_not_evidence() -> None:
    s = reported_settlement(HEAD, "pass", HEAD, "", scope())
    attempt = Attempt("r", AttemptKind.INITIAL, HEAD, "counted", "pass", None, s.evidence, HEAD, "rvs_a")
    result = count(attempt)
    assert result.qualifying == 0 and "without journal evidence" in result.refused[0].reason
    # Journal evidence arriving later replaces the reported verdict; an unknown marker stays unknown.
    accepted = journal_settlement(closing(**ACCEPTED), HEAD, "j1")
    assert settlement_to_write("r", s.outcome, accepted, s.evidence) == accepted
    forged = journal_settlement(closing(**{**ACCEPTED, "evidence": "yes"}), HEAD, "j2")
    assert settlement_to_write("r", forged.outcome, accepted, forged.evidence) is None


def test_retries_and_rechecks_in_one_session_are_one_review() -> None:
    first = settled("r1", closing(**ACCEPTED))
    retry = replace(settled("r2", closing(**ACCEPTED)), kind=AttemptKind.RETRY)
    recheck = replace(settled("r3", closing(**ACCEPTED)), kind=AttemptKind.RECHECK)
    result = count(first, retry, recheck, rows=rows_of([], 2))
    assert (result.qualifying, result.required) == (1, 2)
    assert {r.receipt_id for r in result.refused} == {"r2", "r3"}
    assert all("already counted" in r.reason for r in result.refused)
    # One journal settles one review, whatever sessions the receipts name.
    copied = settled("r4", closing(**ACCEPTED), session="rvs_b", journal="j-r1")
    assert count(first, copied, rows=rows_of([], 2)).qualifying == 1


def test_row_one_selects_the_pipeline_review_and_the_gate_names_the_rows_left() -> None:
    rows = rows_of([ROW1, ROW2], 2)
    pipeline = settled("p", closing(**ACCEPTED), kind=AttemptKind.PIPELINE)
    result = count(pipeline, rows=rows)
    assert [(f.row, f.receipt_id) for f in result.filled] == [(1, "p")]
    assert [r.index for r in result.remaining] == [2]
    # A pipeline review that ran row 2's selection is not row 1's result, and fills no other row.
    off = settled("q", closing(**ACCEPTED), session="rvs_b", kind=AttemptKind.PIPELINE)
    result = count(off, rows=rows)
    assert result.qualifying == 0 and "row 1 selects" in result.refused[0].reason
    standalone = settled("s", closing(**ACCEPTED), session="rvs_b", kind=AttemptKind.STANDALONE)
    assert count(pipeline, standalone, rows=rows).qualifying == 2
    # A WARM row 1 is met only by a review continuing a WARM lineage.
    warm_rows = rows_of([{**ROW1, "mode": "warm"}], 1)
    assert count(pipeline, rows=warm_rows).qualifying == 0
    assert (
        count(
            settled("w", closing(**ACCEPTED), session="rvs_w", kind=AttemptKind.PIPELINE), rows=warm_rows
        ).qualifying
        == 1
    )


def test_gate_stats_replays_the_gates_own_rule_so_confident_no_one_skips_nothing() -> None:
    records = [
        {"decision": "review", "source": "classifier", "choice": "no", "confidence": c} for c in (1.0, 0.9)
    ]
    would = summarize(records)["would_skip"]
    assert would["1.0"] == 0 and would["0.9"] == 2 and would["0.95"] == 1


# --- the property ---

MARKERS = st.sampled_from(
    ["accepted", "rejected", "absent", "ACCEPTED", ":accepted", "", None, 1, "verified"]
)
PAYLOADS = st.fixed_dictionaries(
    {},
    optional={
        "evidence": MARKERS,
        "refs": st.just([1]),
        "verdict": st.sampled_from(["pass", "issues", "PASS"]),
        "reviewed_head": st.sampled_from([HEAD, OTHER]),
        "diff_scope": st.sampled_from([scope(), scope(base=OTHER), scope(head=OTHER), {"rows": 1}]),
    },
)
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("admit"),
            st.sampled_from(list(AttemptKind)),
            st.sampled_from(["", "rvs_a", "rvs_b", "rvs_w", "rvs_x", "rvs_fake"]),
            st.sampled_from([HEAD, OTHER]),
        ),
        st.tuples(st.just("journal"), st.integers(0, 11), PAYLOADS, st.sampled_from(["j1", "j2", "j3"])),
        st.tuples(st.just("report"), st.integers(0, 11), st.sampled_from(["pass", "issues"])),
        st.tuples(st.just("no_verdict"), st.integers(0, 11)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=OPS,
    sequence=st.lists(st.sampled_from([ROW1, ROW2, {**ROW1, "mode": "warm"}]), max_size=3),
    required=st.integers(1, 3),
)
def test_no_history_counts_more_than_distinct_sessions_with_verified_evidence(
    ops: list[Any], sequence: list[dict[str, str]], required: int
) -> None:
    receipts: list[Attempt] = []
    for op in ops:
        if op[0] == "admit":
            _, kind, session, head = op
            receipts.append(Attempt(f"r{len(receipts)}", kind, head, None, None, review_session_id=session))
            continue
        if not receipts:
            continue
        index = op[1] % len(receipts)
        current = receipts[index]
        if op[0] == "journal":
            new = journal_settlement(closing(**op[2]), current.head_sha, op[3])
        elif op[0] == "report":
            new = reported_settlement(current.head_sha, op[2], current.head_sha, "")
        else:
            new = reported_settlement(current.head_sha, "", "", "exited")
        from dispatch_budget.domain.rounds import Outcome

        prior = Outcome(current.outcome) if current.outcome else None
        try:
            write = settlement_to_write(current.receipt_id, prior, new, current.evidence)
        except DomainError:
            continue  # an attempt settles once
        if write is not None:
            receipts[index] = replace(
                current,
                outcome=write.outcome.value,
                verdict=write.verdict,
                reason=write.reason,
                evidence=write.evidence,
                reviewed_head=write.reviewed_head,
                journal_run_id=write.journal_run_id,
                diff_scope=write.diff_scope,
            )
    rows = rows_of(sequence, required)
    result = tally(HEAD, rows, receipts, SESSIONS, repository=REPO, pr_number=PR)
    verified = {
        a.review_session_id
        for a in receipts
        if a.outcome == "counted"
        and a.verdict == "pass"
        and a.evidence == "accepted"
        and a.head_sha == HEAD
        and a.reviewed_head == HEAD
        and a.review_session_id in SESSIONS
        and SESSIONS[a.review_session_id].repository == REPO
        and a.diff_scope is not None
        and a.diff_scope.get("base") == BASE
    }
    assert result.qualifying <= len(verified)
    assert result.qualifying <= len(rows) == result.required
    assert len({f.review_session_id for f in result.filled}) == len(result.filled)
    assert len({f.row for f in result.filled}) == len(result.filled)
    assert all(f.review_session_id in verified for f in result.filled)
    assert len(result.remaining) == len(rows) - result.qualifying
