"""The gateway's routes, by plane and prefix. Every body a route reads and every answer it gives is a shape
of ``reviewloop.shapes``; ``gateway.translate`` turns protobuf into those shapes.

Route table, prefix -> module (spec):

    /v1/messages, /v1/reviews, /v1/review-policy          -> reviews              (000: composer, reviewers)
    /v1/reviews/{id}/undo                                 -> undo                 (issue 38: the undo window)
    /v1/review-events                                     -> events               (000, nudges)
    /v1/review-events/stream, /v1/admin/projects/{id}/webhooks
                                                          -> push                 (issue 19)
    /v1/rules, /v1/categories, /v1/risk-dial              -> rules                (000)
    /v1/review-rounds/{runs,admissions,budget}            -> budget.rounds        (003)
    /v1/runs/{run_id}/extend-review-budget                -> budget.rounds        (003)
    /v1/journals                                          -> budget.journals      (002)
    /v1/review-rounds/{runners,config,sequences,mode,sessions}
                                                          -> budget.catalog       (003)
    /v1/sessions, /v1/gate-decisions                      -> budget.gate          (001)
    /v1/admin/projects/{id}/{review-policy,blocks,suppressions,inbound}
                                                          -> admin.reviews        (000)
    /v1/admin/{orgs/{id}/rules,rules,categories,composition-keys}
    /v1/admin/projects/{id}/{categories,graduation-proposals,risk-dial,rule-settings}
                                                          -> admin.rules          (000)
    /v1/admin/projects, /v1/admin/api-keys                -> admin.projects       (gateway store)
    /v1/admin/projects/{id}/dead-letters                  -> admin.outbox         (every service; issue 13)
    /v1/admin/send-pools                                  -> admin.pools          (the shared-pool governor)

``/healthz``, ``/openapi.yaml``, ``/v1/contract-manifest`` and ``/mcp`` are the ASGI app's own
(``gateway.asgi``). ``ROUTERS`` is the order the app includes them in, which is the order of the paths in
``/openapi.yaml`` and of the MCP tools.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from reviewloop.errors import invalid

from gateway.routes import events, push, reviews, rule_preview, rules, undo
from gateway.routes.admin import outbox, pools, projects
from gateway.routes.admin import reviews as admin_reviews
from gateway.routes.admin import rules as admin_rules
from gateway.routes.budget import catalog, gate, journals, rounds

ROUTERS: tuple[APIRouter, ...] = (
    reviews.router,
    undo.router,
    admin_reviews.router,
    events.router,
    push.router,
    rules.router,
    rule_preview.router,
    admin_rules.router,
    rounds.router,
    journals.router,
    catalog.router,
    gate.router,
    projects.router,
    outbox.router,
    pools.router,
)


async def plain_parameters(request: Request) -> None:
    """Every route's dependency: a path or query parameter with a NUL character is a 422 naming it. No
    id holds one, and PostgreSQL refuses NUL in text, so it would otherwise reach a store as a 500."""
    for params in (request.path_params, request.query_params):
        for name, value in params.items():
            if isinstance(value, str) and "\x00" in value:
                raise invalid(f"/{name}", "must not contain a NUL character")
