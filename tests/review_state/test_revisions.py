"""Issue 16: every revision's content is kept (review_revisions), written in the unit of work that
creates the revision, and read back per review within the tenant only; on both backends."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from alembic import command
from review_state import app
from review_state.__main__ import SPEC
from review_state.app import Decision, Env, Revision
from review_state.domain.review import AttachmentFacts
from review_state.domain.submission import Attachment
from reviewloop.errors import Code, DomainError
from reviewloop.storage.engine import WRITE_OPTION
from reviewloop.storage.migrations import _config
from reviewloop.tenancy import ActorKind, Principal

from tests.review_state.conftest import AGENT, DRAFT, HUMAN, queued

STRANGER = Principal("org_2", "prj_2", ActorKind.HUMAN, "key_x")


async def test_each_revision_keeps_its_content(env: Env) -> None:
    review = await queued(env)
    pdf = Attachment("deck.pdf", "application/pdf", b"%PDF-1.7 deck")
    second = await app.submit_revision(
        env,
        AGENT,
        app.SubmitRevisionRequest(
            review.id, 1, Revision(body_text="v2 body", cc=["cfo@example.com"], attachments=(pdf,))
        ),
    )
    opened = await app.open_review(env, HUMAN, review.id, second.revision, second.version)
    third = await app.decide(
        env, HUMAN, review.id, Decision("edit", opened.revision, opened.version, subject="v3 subject")
    )
    assert third.revision == 3

    kept = await app.get_revisions(env, HUMAN, review.id)
    assert [r.revision for r in kept] == [1, 2, 3]
    first, two, three = kept
    assert (first.subject, first.body_text, first.cc, first.attachments) == (
        DRAFT.subject,
        DRAFT.body_text,
        list(DRAFT.cc),
        (),
    )
    assert (two.subject, two.body_text, two.cc) == (DRAFT.subject, "v2 body", ["cfo@example.com"])
    assert two.attachments == (
        AttachmentFacts("deck.pdf", len(pdf.content), hashlib.sha256(pdf.content).hexdigest()),
    )
    assert (three.subject, three.body_text, three.attachments) == ("v3 subject", "v2 body", two.attachments)


async def test_a_refused_redraft_keeps_no_revision(env: Env) -> None:
    review = await queued(env)
    with pytest.raises(DomainError):
        await app.submit_revision(
            env, AGENT, app.SubmitRevisionRequest(review.id, 7, Revision(body_text="stale"))
        )
    assert [r.revision for r in await app.get_revisions(env, AGENT, review.id)] == [1]


async def test_another_tenant_reads_no_revisions(env: Env) -> None:
    review = await queued(env)
    with pytest.raises(DomainError) as caught:
        await app.get_revisions(env, STRANGER, review.id)
    assert caught.value.code is Code.NOT_FOUND


async def test_the_migration_backfills_the_current_revision(env: Env) -> None:
    """A review from before revisions were kept gets its current revision's content on upgrade."""
    review = await queued(env)
    review = await app.submit_revision(
        env, AGENT, app.SubmitRevisionRequest(review.id, 1, Revision(body_text="v2 body"))
    )
    cfg = _config(SPEC.migrations_dir, SPEC.metadata)

    def to(target: str) -> Any:
        def run(sync_conn: Any) -> None:
            cfg.attributes["connection"] = sync_conn
            (command.upgrade if target == "head" else command.downgrade)(cfg, target)

        return run

    engine = env.db.engine.execution_options(**{WRITE_OPTION: True})
    async with engine.begin() as conn:
        await conn.run_sync(to("a7c41d2e9b10"))  # the schema before review_revisions
    async with engine.begin() as conn:
        await conn.run_sync(to("head"))
    kept = await app.get_revisions(env, HUMAN, review.id)
    assert [(r.revision, r.body_text) for r in kept] == [(2, "v2 body")]
