"""rules use cases: one function per RPC, one unit of work each, one module per part of the context.

- ``rules``: saving a rule (read-before-write on ``rev``, guardrails, staged approval), the
  console's lineage verbs (retire, undo, approve, reject), history, the staged-approval setting;
- ``stack``: the effective stack (``get_rules``), composition tokens and their signing keys;
- ``categories``: the category registry;
- ``merge``: merging a category into another (its rules move, its drafts are rechecked);
- ``graduation``: proposals and the rung a human flips;
- ``dial``: the brand-risk dial;
- ``pacing``: the backlog pacing values (the dial's family);
- ``ingest``: review outcomes from review_state (maturity counters, drift demotion);
- ``authority``: who may do what, and who owns what;
- ``env``: the ``Env`` every use case takes (built by ``rules.bootstrap``).

Every change another context must learn of is an outbox event written in the change's own unit of
work: ``rule_changed`` whenever the effective stack moves, ``category_changed`` whenever a rung does.
"""

from rules.app.authority import resolve_owner
from rules.app.categories import (
    CategoryView,
    count_categories,
    create_category,
    get_category,
    list_categories,
    update_category,
)
from rules.app.dial import CategoryDial, Dial, get_risk_dial, set_risk_dial
from rules.app.env import Env, Settings
from rules.app.graduation import (
    Proposal,
    graduate,
    graduation_status,
    list_graduation_proposals,
    propose_graduation,
    reject_graduation_proposal,
)
from rules.app.ingest import SUBSCRIPTIONS
from rules.app.merge import Merge, category_audit, merge_categories
from rules.app.pacing import get_pacing_settings, set_pacing_settings
from rules.app.preview import RulePreview, preview_rule
from rules.app.rules import (
    RuleInput,
    RuleView,
    approve_rule,
    get_rule_settings,
    promote_rule,
    reject_rule,
    retire_rule,
    rule_history,
    save_rule,
    set_rule_settings,
    undo_rule,
)
from rules.app.stack import (
    Snapshot,
    TokenCheck,
    TokenStatus,
    ensure_token_key,
    get_rules,
    rotate_composition_key,
    validate_composition_token,
)

__all__ = [
    "SUBSCRIPTIONS",
    "CategoryDial",
    "CategoryView",
    "Dial",
    "Env",
    "Merge",
    "Proposal",
    "RuleInput",
    "RulePreview",
    "RuleView",
    "Settings",
    "Snapshot",
    "TokenCheck",
    "TokenStatus",
    "approve_rule",
    "category_audit",
    "count_categories",
    "create_category",
    "ensure_token_key",
    "get_category",
    "get_pacing_settings",
    "get_risk_dial",
    "get_rule_settings",
    "get_rules",
    "graduate",
    "graduation_status",
    "list_categories",
    "list_graduation_proposals",
    "merge_categories",
    "preview_rule",
    "promote_rule",
    "propose_graduation",
    "reject_graduation_proposal",
    "reject_rule",
    "resolve_owner",
    "retire_rule",
    "rotate_composition_key",
    "rule_history",
    "save_rule",
    "set_pacing_settings",
    "set_risk_dial",
    "set_rule_settings",
    "undo_rule",
    "update_category",
    "validate_composition_token",
]
