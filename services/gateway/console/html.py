"""The console's templates (one Jinja2 environment on ``templates/``, autoescaped), its page frame and
the one declared keymap (handlers, button hints and the ``?`` overlay all read it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jinja2
from markupsafe import Markup
from starlette.responses import HTMLResponse

from gateway.console import web
from gateway.console.sessions import Session

# No remote loads anywhere: a draft's HTML part renders in a sandboxed srcdoc frame, which inherits this.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class Key:
    key: str
    action: str
    help: str


KEYMAP = (
    Key("j", "next", "Move to the next draft"),
    Key("k", "previous", "Move to the previous draft"),
    Key("o", "open", "Open the selected draft (pick it up for review)"),
    Key("a", "approve", "Approve the draft as shown"),
    Key("e", "edit", "Edit the draft inline"),
    Key("r", "reject", "Reject with feedback for the agent"),
    Key("x", "escalate", "Escalate"),
    Key(
        "z",
        "undo",
        "Undo the approve or edit you just made, before it is sent (on a batch's results, only when one "
        "line is left to undo: with several, choose the line)",
    ),
    Key("?", "help", "Show or hide this help"),
)


@dataclass(frozen=True)
class NavItem:
    name: str
    href: str
    label: str
    admin: bool  # shown to admin keys only


NAV = (
    NavItem("queue", "/console/queue", "Queue", False),
    NavItem("rules", "/console/rules", "Rules", True),
    NavItem("categories", "/console/categories", "Categories", True),
    NavItem("settings", "/console/settings", "Settings", True),
    NavItem("budgets", "/console/budgets", "Budgets", True),
    NavItem("sequence", "/console/sequence", "Review sequences", True),
    NavItem("dead-letters", "/console/dead-letters", "Dead letters", True),
)


def relative(seconds: float) -> str:
    """``seconds`` ago as a reader says it: "just now", "3 min ago", "2 h ago", "4 d ago"; a moment ahead
    (a deadline) is "in 3 h"."""
    if seconds <= -45:
        return "in " + relative(-seconds).removesuffix(" ago")
    if seconds < 45:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "1 min ago"


@dataclass(frozen=True)
class Moment:
    exact: str  # "2026-12-07 03:40:00 UTC", shown on hover
    ago: str  # relative(): "3 min ago", "in 2 h"


def parse_moment(iso: str) -> Moment | None:
    """An ISO timestamp as the ``when`` macro shows it; None when it is not one."""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return Moment(
        moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        relative((datetime.now(UTC) - moment).total_seconds()),
    )


# One environment: autoescape on (a value is escaped unless it is Markup a template rendered), and a
# variable a page forgets fails its render (and its test) instead of rendering empty.
ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("gateway.console", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.globals.update(
    keymap=KEYMAP,
    key_of={k.action: k.key for k in KEYMAP},
    keymap_json=json.dumps({k.key: k.action for k in KEYMAP}),  # console.js's keys -> actions
    nav=NAV,
    parse_moment=parse_moment,
    fresh_key=web.idempotency_key,  # each action form's own idempotency key
)


def render(template: str, **context: Any) -> Markup:
    """A template rendered to markup (a page's body, or a partial another page includes)."""
    return Markup(ENV.get_template(template).render(**context))


def page(
    title: str,
    body: Markup,
    *,
    session: Session | None = None,
    active: str = "",
    status: int = 200,
    announce: str = "",
    extra_headers: dict[str, str] | None = None,
    toast: Markup | None = None,
) -> HTMLResponse:
    """A whole console page: ``body`` in the frame (base.html). ``announce`` is read out by the aria-live
    region once the page loads; ``toast``: a control beside it (the undo of a decision). ``body`` and
    ``toast`` are rendered templates (``render``)."""
    document = ENV.get_template("base.html").render(
        title=title,
        body=body,
        session=session,
        active=active,
        announce=announce,
        toast=toast or "",
    )
    headers = {**SECURITY_HEADERS, **(extra_headers or {})}
    return HTMLResponse(document, status_code=status, headers=headers)
