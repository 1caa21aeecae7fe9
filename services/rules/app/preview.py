"""``PreviewRule``: a rule before it is saved (issue 38). The text a reviewer's edit suggests, and the
live rules of the same place on the ladder it may conflict with (``domain.proposal``), with every check a
save makes of its text and place. Nothing is written: the console's save-as-rule panel and an agent's
"turn a diff into a rule" ask the same question here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from reviewloop.storage import utcnow
from reviewloop.tenancy import Principal

from rules import store
from rules.app.authority import writer
from rules.app.categories import check_category
from rules.app.env import Env
from rules.app.rules import RuleInput, RuleView, checked_draft, view_of
from rules.domain.ladder import RuleRev, next_revision
from rules.domain.proposal import Change, conflicts, propose


@dataclass(frozen=True)
class RulePreview:
    proposed_text: str  # what the edit suggests ("" when it changed no word)
    rule_text: str  # the text checked: the one given, else the proposed one ("" when neither)
    conflicts: list[tuple[RuleView, str]]  # (the live rule, duplicate | contradiction | overlap)


async def preview_rule(
    env: Env, principal: Principal, body: RuleInput, changes: Sequence[Change]
) -> RulePreview:
    proposed = propose(changes)
    text = body.rule_text.strip() or proposed
    if not text:
        return RulePreview(proposed, "", [])
    draft = checked_draft(principal, replace(body, rule_text=text))
    async with env.db.single_statement.connect() as conn:
        candidate = next_revision(
            None,
            draft,
            await writer(conn, principal),
            rule_id="",
            new_lineage_id="",
            high_water=0,
            now=utcnow(),
        )
        if candidate.category_id:
            await check_category(conn, principal, candidate.category_id)
        revisions = await store.revisions_on_ladder(conn, principal.org_id, principal.project_id)
    lineages: dict[str, list[RuleRev]] = {}
    for revision in revisions:
        lineages.setdefault(revision.lineage_id, []).append(revision)
    found = [
        (view_of(sorted(lineages[c.rule.lineage_id], key=lambda r: r.rev), c.rule), c.kind)
        for c in conflicts(candidate, revisions)
    ]
    return RulePreview(proposed, text, found)
