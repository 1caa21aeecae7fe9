"""Selection, sequences, mode resolution and lineage (spec 003), with its "Required evidence" list:
fresh COLD identity/full range, retained WARM identity/delta range, unavailable-WARM refusal,
runner-choice-independent eligibility, effort preservation and sequence round trips."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
from dispatch_budget import app
from dispatch_budget.__main__ import SPEC
from dispatch_budget.domain.budget import AttemptKind, Trigger
from hypothesis import given, settings
from hypothesis import strategies as st
from reviewloop.errors import Code, DomainError
from reviewloop.review_dispatch.selection import (
    ReviewMode,
    RunnerSpec,
    deserialize_request_review,
    project_default_mode,
    resolve_review_mode,
    serialize_request_review,
    validate_sequence,
)
from reviewloop.service import ServiceSpec
from reviewloop.storage import Database
from reviewloop.tenancy import ActorKind, Principal

OpenDb = Callable[[ServiceSpec], Awaitable[Database]]
ADMIN = Principal("org_1", "prj_1", ActorKind.ADMIN, "key_admin")
REVIEWER = Principal("org_1", "prj_1", ActorKind.REVIEW_AGENT, "agt_rev")
CODEX = RunnerSpec(
    "codex", ("gpt-5", "gpt-5-mini"), ("low", "medium", "high"), "gpt-5", "medium", True, False
)
CLAUDE = RunnerSpec("claude", ("opus", "sonnet"), ("default", "max"), "sonnet", "default", True, True)
ONESHOT = RunnerSpec("oneshot", ("m1",), ("std",), "m1", "std", supports_warm=False)
CATALOG = {r.name: r for r in (CODEX, CLAUDE, ONESHOT)}
BASE, H1, H2 = "1" * 40, "2" * 40, "3" * 40


async def _catalog(db: Database) -> None:
    for runner in CATALOG.values():
        await app.register_runner(db, ADMIN, runner)


def _refusal(call: Callable[[], Any]) -> DomainError:
    try:
        call()
    except DomainError as error:
        return error
    raise AssertionError("expected a refusal")


# --- sequences ---


def test_empty_model_and_effort_pick_the_runner_default_explicitly() -> None:
    rows = validate_sequence(
        [
            {"runner": "codex", "mode": "cold"},
            {"runner": "claude", "model": "default", "effort": "max", "mode": "warm"},
        ],
        CATALOG,
    )
    assert [r.to_json() for r in rows] == [
        {"runner": "codex", "model": "gpt-5", "effort": "medium", "mode": "cold"},
        {"runner": "claude", "model": "sonnet", "effort": "max", "mode": "warm"},
    ]


def test_every_invalid_row_is_refused_with_a_field_level_reason() -> None:
    error = _refusal(
        lambda: validate_sequence(
            [
                {"runner": "same", "mode": "cold"},
                {"runner": "gemini", "mode": "cold"},
                {"runner": "codex", "model": "opus", "effort": "max", "mode": "hot"},
                {"runner": "oneshot", "mode": "warm"},
                {"runner": "codex", "mode": "cold", "session_policy": "reuse"},
                "codex",
            ],
            CATALOG,
        )
    )
    fields = [v.field for v in error.violations]
    assert error.code is Code.BAD_REQUEST
    assert fields == [
        "/sequence/0/runner",
        "/sequence/1/runner",
        "/sequence/2/mode",
        "/sequence/2/model",
        "/sequence/2/effort",
        "/sequence/3/mode",
        "/sequence/4/session_policy",
        "/sequence/5",
    ]
    assert "sentinel" in error.violations[0].description and "codex" in error.violations[1].description


@pytest.mark.parametrize("rows", [[], {}, None, [{"runner": "codex", "mode": "cold"}] * 11])
def test_a_sequence_is_a_non_empty_bounded_array(rows: Any) -> None:
    assert _refusal(lambda: validate_sequence(rows, CATALOG)).violations[0].field == "/sequence"


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([CODEX, CLAUDE]),
            st.integers(0, 5),
            st.integers(0, 5),
            st.sampled_from(["warm", "cold"]),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_sequences_round_trip_through_the_shared_serializer(
    raw: list[tuple[RunnerSpec, int, int, str]],
) -> None:
    rows = [
        {
            "runner": r.name,
            "model": r.models[m % len(r.models)],
            "effort": r.efforts[e % len(r.efforts)],
            "mode": mode,
        }
        for r, m, e, mode in raw
    ]
    selections = validate_sequence(rows, CATALOG)
    payload = serialize_request_review(selections)
    assert payload["action"] == "request-review" and ("sequence" in payload) == (len(rows) > 1)
    again = validate_sequence(deserialize_request_review(payload), CATALOG)
    assert again == selections and [s.to_json() for s in again] == rows  # effort preserved in every row


# --- mode resolution ---

W, C = ReviewMode.WARM, ReviewMode.COLD


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((C, W, W, W, W), (C, "explicit")),  # an explicit COLD beats a configured WARM default
        ((None, W, C, C, C), (W, "run")),
        ((None, None, W, C, C), (W, "pr_work")),
        ((None, None, None, W, C), (W, "repeat_context")),
        ((None, None, None, None, W), (W, "project")),
        ((None, None, None, None, None), (C, "default")),
    ],
)
def test_resolve_review_mode_follows_the_precedence(
    args: tuple[Any, ...], expected: tuple[ReviewMode, str]
) -> None:
    assert resolve_review_mode(*args) == expected


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (
            {"review": {"mode": "warm", "minimum_independent_reviews": 2}},
            "/review/minimum_independent_reviews",
        ),
        ({"review": {"require_cross_runner": True}}, "/review/require_cross_runner"),
        ({"review": {"self_review": {"session_policy": "fresh"}}}, "/review/self_review/session_policy"),
        ({"mode": "lukewarm"}, "/review/mode"),
    ],
)
def test_removed_configuration_keys_are_refused_with_a_conversion_hint(
    config: dict[str, Any], field: str
) -> None:
    error = _refusal(lambda: project_default_mode(config))
    assert error.code is Code.BAD_REQUEST and error.violations[0].field == field
    assert "removed" in error.violations[0].description or field == "/review/mode"


async def test_the_project_configuration_supplies_the_default_mode(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    assert project_default_mode({"review": {"mode": "warm"}}) is W
    configured = {"review": {"mode": "warm"}}
    resolve = partial(app.resolve_mode, db, REVIEWER, run_id="", given=app.RunModes(), project_default=None)
    assert await resolve(explicit=None, project_config=configured) == (W, "project")
    assert await resolve(explicit=C, project_config=configured) == (C, "explicit")


async def test_a_stored_run_supplies_its_rungs_to_the_resolver_and_to_admission(open_db: OpenDb) -> None:
    db = await open_db(SPEC)

    def run(modes: app.RunModes) -> Awaitable[app.Run]:
        return app.record_run(db, REVIEWER, app.RunSnapshot("r1", head_sha=H1, modes=modes))

    await run(app.RunModes(pr_work=W))
    # A later snapshot that names no mode keeps the stored rung; one that names a rung adds it.
    stored = await run(app.RunModes(repeat_context=C))
    assert stored.modes == app.RunModes(None, W, C)
    resolve = partial(app.resolve_mode, db, REVIEWER, project_default=None, project_config=None)
    assert await resolve(run_id="r1", explicit=None, given=app.RunModes()) == (W, "pr_work")
    assert await resolve(run_id="r1", explicit=None, given=app.RunModes(review=C)) == (C, "run")
    assert await resolve(run_id="r1", explicit=C, given=app.RunModes()) == (C, "explicit")
    with pytest.raises(DomainError) as missing:
        await resolve(run_id="nope", explicit=None, given=app.RunModes())
    assert missing.value.code is Code.NOT_FOUND

    # Admission fills a selection's missing mode by the same precedence; an explicit mode stands.
    def admit(attempt_key: str, selection: dict[str, str]) -> Awaitable[app.Admission]:
        attempt = app.AdmissionRequest(
            "r1", attempt_key, AttemptKind.INITIAL, Trigger.OPERATOR_REQUEST, H1, selection
        )
        return app.admit_review_round(db, REVIEWER, attempt)

    implied = await admit("a1", {"runner": "codex"})
    assert implied.receipt.selection["mode"] == "warm"
    chosen = await admit("a2", {"runner": "codex", "mode": "cold"})
    assert chosen.receipt.selection["mode"] == "cold"


async def test_the_stored_project_configuration_is_the_default_everywhere(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    with pytest.raises(DomainError) as agent:
        await app.set_review_config(db, REVIEWER, {"review": {"mode": "warm"}})
    assert agent.value.code is Code.FORBIDDEN_SCOPE
    with pytest.raises(DomainError) as removed:
        await app.set_review_config(db, ADMIN, {"review": {"mode": "warm", "require_cross_runner": True}})
    assert removed.value.code is Code.BAD_REQUEST
    assert await app.get_review_config(db, REVIEWER) == ({}, None)  # the refusal stored nothing

    assert await app.set_review_config(db, ADMIN, {"review": {"mode": "warm"}}) == (
        {"review": {"mode": "warm"}},
        W,
    )
    resolve = partial(app.resolve_mode, db, REVIEWER, run_id="", given=app.RunModes(), project_default=None)
    assert await resolve(explicit=None, project_config=None) == (W, "project")
    assert await resolve(explicit=C, project_config=None) == (C, "explicit")  # explicit COLD beats it
    await app.record_run(
        db, REVIEWER, app.RunSnapshot(run_id="r1", repository="", pr_number=0, head_sha=H1, status=None)
    )
    admitted = await app.admit_review_round(
        db,
        REVIEWER,
        app.AdmissionRequest(
            run_id="r1",
            attempt_key="a1",
            kind=AttemptKind.INITIAL,
            trigger=Trigger.OPERATOR_REQUEST,
            head_sha=H1,
            selection={"runner": "codex"},
        ),
    )
    assert admitted.receipt.selection["mode"] == "warm"


# --- catalog and lineage on both backends ---


async def test_only_admins_register_runners_and_the_catalog_is_per_project(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    with pytest.raises(DomainError) as caught:
        await app.register_runner(db, REVIEWER, CODEX)
    assert caught.value.code is Code.FORBIDDEN_SCOPE
    with pytest.raises(DomainError) as caught:
        await app.register_runner(db, ADMIN, RunnerSpec("same", ("m",), ("e",), "m", "e"))
    assert caught.value.violations[0].field == "/name"
    await _catalog(db)
    assert [r.name for r in await app.list_runners(db, REVIEWER)] == ["claude", "codex", "oneshot"]
    assert await app.list_runners(db, Principal("org_2", "prj_2", ActorKind.ADMIN, "k")) == []
    _rows, payload = await app.validate_review_sequence(db, REVIEWER, [{"runner": "codex", "mode": "cold"}])
    assert payload == {
        "action": "request-review",
        "runner": "codex",
        "model": "gpt-5",
        "effort": "medium",
        "mode": "cold",
    }


async def _bind(
    db: Database, selection: dict[str, str], head: str, pr: int = 5, **lineage: str
) -> app.Binding:
    return await app.bind_review_session(
        db, REVIEWER, app.BindRequest("acme/api", pr, BASE, head, **lineage), selection
    )


async def test_cold_is_a_fresh_session_over_the_full_range_and_warm_continues_the_delta(
    open_db: OpenDb,
) -> None:
    db = await open_db(SPEC)
    await _catalog(db)
    cold = await _bind(db, {"runner": "claude", "model": "opus", "effort": "max", "mode": "cold"}, H1)
    assert cold.fresh_session and (cold.range_base, cold.range_head) == (BASE, H1)
    await app.complete_review_session(db, REVIEWER, cold.session_id, H1)
    # WARM: the same session (identity retained), only lastReviewedHead..currentHead, effort preserved.
    warm = await _bind(
        db,
        {"runner": "claude", "model": "opus", "effort": "max", "mode": "warm"},
        H2,
        review_id=cold.review_id,
    )
    assert not warm.fresh_session and warm.session_id == cold.session_id
    assert (warm.range_base, warm.range_head) == (H1, H2) and warm.selection.effort == "max"
    await app.complete_review_session(db, REVIEWER, warm.session_id, H2)
    # A second COLD for the same PR is a new session, never a reset of the old one.
    again = await _bind(db, {"runner": "claude", "mode": "cold"}, H2)
    assert (
        again.fresh_session
        and again.session_id != cold.session_id
        and (again.range_base, again.range_head) == (BASE, H2)
    )


async def test_unavailable_warm_is_refused_never_silently_cold(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _catalog(db)
    warm = {"runner": "codex", "model": "gpt-5", "effort": "high", "mode": "warm"}
    cold = await _bind(db, {**warm, "mode": "cold"}, H1)

    async def refused(**kw: Any) -> str:
        selection = kw.pop("selection", warm)
        with pytest.raises(DomainError) as caught:
            await _bind(db, selection, H2, **kw)
        assert (
            caught.value.code is Code.WRONG_STATE
            and "never silently falls back to COLD" in caught.value.detail
        )
        return caught.value.detail

    assert "no review lineage" in await refused()  # missing
    assert "busy" in await refused(review_id=cold.review_id)  # the COLD review is still running
    await app.complete_review_session(db, REVIEWER, cold.session_id, H1)
    assert "no previous review session" in await refused(review_id="rvl_unknown")
    assert "another repository/PR" in await refused(review_id=cold.review_id, pr=6)  # foreign
    assert "runs on codex" in await refused(
        review_id=cold.review_id, selection={"runner": "claude", "mode": "warm"}
    )
    assert "cannot change model" in await refused(
        review_id=cold.review_id, selection={**warm, "effort": "low"}
    )
    with pytest.raises(DomainError) as caught:  # a runner without WARM support is refused at validation
        await _bind(db, {"runner": "oneshot", "mode": "warm"}, H2, review_id=cold.review_id)
    assert caught.value.violations[0].field == "/selection/mode"
    sessions = await _bind(db, warm, H2, review_id=cold.review_id)
    assert sessions.session_id == cold.session_id  # the refusals changed nothing


async def test_eligibility_and_budget_do_not_depend_on_runner_choice(open_db: OpenDb) -> None:
    db = await open_db(SPEC)
    await _catalog(db)
    # A sequence on one runner only is as valid as a diverse one: nothing depends on runner diversity.
    same = await app.validate_review_sequence(db, REVIEWER, [{"runner": "codex", "mode": "cold"}] * 3)
    assert len(same[0]) == 3
    await app.record_run(
        db,
        REVIEWER,
        app.RunSnapshot(run_id="r1", repository="acme/api", pr_number=1, head_sha=H1, status=None),
    )
    await app.record_run(
        db,
        REVIEWER,
        app.RunSnapshot(run_id="r2", repository="acme/api", pr_number=2, head_sha=H1, status=None),
    )
    for i in range(5):
        for run_id, runner in (("r1", "codex"), ("r2", ["codex", "claude"][i % 2])):
            await app.admit_review_round(
                db,
                REVIEWER,
                app.AdmissionRequest(
                    run_id=run_id,
                    attempt_key=f"{run_id}-{i}",
                    kind=AttemptKind.INITIAL,
                    trigger=Trigger.OPERATOR_REQUEST,
                    head_sha=H1,
                    selection={"runner": runner},
                ),
            )
    budgets = [(await app.get_round_budget(db, REVIEWER, r)).budget.label for r in ("r1", "r2")]
    assert budgets == ["5/5", "5/5"]
