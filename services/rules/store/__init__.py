"""The rules store, in the domain's words. Core statements, not the ORM; one module per concern:

- ``tables``: every table, and the upsert both dialects speak;
- ``revisions``: rule revisions (append-only), lineages, the per-org ``rule_high_water``, the
  write-approval setting and pacing values;
- ``catalog``: categories, their maturity counters, and graduation proposals;
- ``dials``: the risk dial and its per-category overrides;
- ``signing``: composition-token keys (salts, never a key);
- ``merges``: category merges.

Callers use the names re-exported here (``store.lineage``)."""

from rules.store.catalog import (
    CategoryRow,
    add_category,
    add_proposal,
    category_named,
    category_owner,
    category_proposals,
    compare_and_set_category,
    count_categories,
    decide_proposals,
    get_category,
    get_proposal,
    list_categories,
    pending_proposals,
)
from rules.store.dials import (
    account_dial,
    overrides,
    save_overrides,
)
from rules.store.merges import (
    CategoryMergeRow,
    add_category_merge,
    category_merges_of,
)
from rules.store.revisions import (
    add_revision,
    bump_high_water,
    lineage,
    lineage_owner,
    lineages_in_category,
    pacing_values,
    revisions_on_ladder,
    rule_lineage_of,
    set_write_approval,
    write_approval,
)
from rules.store.signing import (
    TokenKey,
    add_token_key,
    newest_token_key,
    retire_legacy_token_keys,
    token_key,
)
from rules.store.tables import (
    categories,
    category_merges,
    graduation_proposals,
    idempotency_keys,
    metadata,
    org_counters,
    pacing_settings,
    risk_dials,
    risk_overrides,
    rule_revisions,
    rule_settings,
    token_keys,
)

__all__ = [
    "CategoryMergeRow",
    "CategoryRow",
    "TokenKey",
    "account_dial",
    "add_category",
    "add_category_merge",
    "add_proposal",
    "add_revision",
    "add_token_key",
    "bump_high_water",
    "categories",
    "category_merges",
    "category_merges_of",
    "category_named",
    "category_owner",
    "category_proposals",
    "compare_and_set_category",
    "count_categories",
    "decide_proposals",
    "get_category",
    "get_proposal",
    "graduation_proposals",
    "idempotency_keys",
    "lineage",
    "lineage_owner",
    "lineages_in_category",
    "list_categories",
    "metadata",
    "newest_token_key",
    "org_counters",
    "overrides",
    "pacing_settings",
    "pacing_values",
    "pending_proposals",
    "retire_legacy_token_keys",
    "revisions_on_ladder",
    "risk_dials",
    "risk_overrides",
    "rule_lineage_of",
    "rule_revisions",
    "rule_settings",
    "save_overrides",
    "set_write_approval",
    "token_key",
    "token_keys",
    "write_approval",
]
