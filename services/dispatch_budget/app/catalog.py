"""Use cases of spec 003's review selection: the runner catalog, the project review configuration,
sequences, mode resolution, and the WARM/COLD lineage binding."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reviewloop.errors import Code, DomainError
from reviewloop.ids import new_id
from reviewloop.review_dispatch.selection import (
    ReviewMode,
    ReviewSelection,
    RunnerSpec,
    project_default_mode,
    serialize_request_review,
    validate_runner,
    validate_selection,
    validate_sequence,
)
from reviewloop.storage import Database, utcnow
from reviewloop.tenancy import ActorKind, Principal
from sqlalchemy.ext.asyncio import AsyncConnection

from dispatch_budget import store
from dispatch_budget.app.authority import check_reviewer_plane
from dispatch_budget.domain.lineage import (
    DEFAULT_LEASE,
    Binding,
    BindRequest,
    ReviewSession,
    check_lease,
    check_lineage_id,
    check_reviewed_head,
    cold_session,
    completed,
    refuse_warm,
    renewed,
    warm_continuation,
)
from dispatch_budget.domain.rounds import RunModes, run_not_found


async def register_runner(db: Database, principal: Principal, spec: RunnerSpec) -> RunnerSpec:
    """Admins register (or replace) a runner with the models and efforts it supports."""
    if principal.actor_kind is not ActorKind.ADMIN:
        raise DomainError(Code.FORBIDDEN_SCOPE, "Only an admin registers runners in the capability catalog.")
    validate_runner(spec)
    async with db.transaction() as uow:
        await store.save_runner(uow.conn, principal.project_id, spec)
    return spec


async def list_runners(db: Database, principal: Principal) -> list[RunnerSpec]:
    async with db.engine.connect() as conn:
        catalog = await store.runner_catalog(conn, principal.project_id)
    return [catalog[name] for name in sorted(catalog)]


async def set_review_config(
    db: Database, principal: Principal, config: dict[str, Any]
) -> tuple[dict[str, Any], ReviewMode | None]:
    """An admin stores the project review configuration; it is validated first (removed keys are
    refused with a conversion hint), so a stored configuration always resolves."""
    if principal.actor_kind is not ActorKind.ADMIN:
        raise DomainError(Code.FORBIDDEN_SCOPE, "Only an admin sets the project review configuration.")
    mode = project_default_mode(config)
    async with db.transaction() as uow:
        await store.review_config.save(uow.conn, principal.project_id, config, utcnow())
    return config, mode


async def get_review_config(db: Database, principal: Principal) -> tuple[dict[str, Any], ReviewMode | None]:
    async with db.single_statement.connect() as conn:
        config = await store.review_config.read(conn, principal.project_id)
    return config, project_default_mode(config)


async def validate_review_sequence(
    db: Database, principal: Principal, rows: Any
) -> tuple[list[ReviewSelection], dict[str, Any]]:
    """The rows normalized against the catalog, and the shared request-review serialization."""
    async with db.engine.connect() as conn:
        catalog = await store.runner_catalog(conn, principal.project_id)
    selections = validate_sequence(rows, catalog)
    return selections, serialize_request_review(selections)


async def resolve_mode(
    db: Database,
    principal: Principal,
    *,
    run_id: str,
    explicit: ReviewMode | None,
    given: RunModes,
    project_default: ReviewMode | None,
    project_config: dict[str, Any] | None,
) -> tuple[ReviewMode, str]:
    """resolveReviewMode; with a ``run_id`` the stored run supplies the rungs the caller left unset,
    and without a configuration in the request the project's stored one supplies the default."""
    modes = given
    async with db.engine.connect() as conn:
        if run_id:
            run = await store.get_run(conn, principal.project_id, run_id)
            if run is None:
                raise run_not_found(run_id)
            modes = run.modes.merged(given)
        if project_config is None:
            project_config = await store.review_config.read(conn, principal.project_id)
    configured = project_default_mode(project_config)
    return modes.resolve(explicit, project_default or configured)


async def bind_review_session(
    db: Database,
    principal: Principal,
    request: BindRequest,
    selection: Any,
    lease: timedelta = DEFAULT_LEASE,
) -> Binding:
    """COLD: a fresh session over the full base..head. WARM: the lineage's verified previous session
    over lastReviewedHead..head, or a visible refusal (missing, foreign, busy, incompatible)."""
    check_reviewer_plane(principal, "Binding a review session")
    request.check()
    project = principal.project_id
    async with db.transaction() as uow:
        conn = uow.conn
        catalog = await store.runner_catalog(conn, project)
        chosen = validate_selection(selection, catalog)
        if chosen.mode is ReviewMode.COLD:
            lineage = request.new_review_id or new_id("rvl")
            check_lineage_id(lineage)
            session = cold_session(
                new_id("rvs"),
                lineage,
                chosen,
                request,
                created_at=utcnow(),
                lease_id=new_id("lse"),
                lease=lease,
            )
            await store.add_review_session(conn, project, session)
            return Binding.of(session, fresh=True)
        if not request.review_id:
            raise refuse_warm("no review lineage was named (review_id) to continue")
        session = warm_continuation(
            await store.lock_lineage_head(conn, project, request.review_id),
            chosen,
            catalog[chosen.runner],
            request,
            now=utcnow(),
            lease_id=new_id("lse"),
            lease=lease,
        )
        await store.rebind_review_session(conn, session)
        return Binding.of(session, fresh=False)


async def complete_review_session(
    db: Database, principal: Principal, session_id: str, reviewed_head: str, lease_id: str = ""
) -> Binding:
    """The session reviewed its range: record the head a later WARM review continues from. Given its
    lease, a reviewer whose lease was taken over may not complete the review that took it."""
    check_reviewer_plane(principal, "Completing a review session")
    check_reviewed_head(reviewed_head)
    async with db.transaction() as uow:
        session = await _session(uow.conn, principal.project_id, session_id)
        if lease_id:
            check_lease(session, lease_id)
        session = completed(session, reviewed_head)
        await store.complete_review_session(uow.conn, session)
        return Binding.of(session, fresh=False)


async def heartbeat_review_session(
    db: Database, principal: Principal, session_id: str, lease_id: str, lease: timedelta = DEFAULT_LEASE
) -> Binding:
    """The reviewer is alive: its lease on the busy session runs ``lease`` from now."""
    check_reviewer_plane(principal, "Renewing a review session's lease")
    async with db.transaction() as uow:
        session = renewed(
            await _session(uow.conn, principal.project_id, session_id), lease_id, utcnow(), lease
        )
        await store.renew_review_session(uow.conn, session)
        return Binding.of(session, fresh=False)


async def _session(conn: AsyncConnection, project: str, session_id: str) -> ReviewSession:
    session = await store.review_session(conn, project, session_id)
    if session is None:
        raise DomainError(Code.NOT_FOUND, f"No review session {session_id} is visible to this key.")
    return session
