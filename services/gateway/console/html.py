"""The console's page frame, escaping and the one declared keymap (handlers, button hints and the ``?``
overlay all read it)."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from starlette.responses import HTMLResponse

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


def h(value: object) -> str:
    """Escape ``value`` for HTML text and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


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
    Key("z", "undo", "Undo the approve or edit you just made, before it is sent"),
    Key("?", "help", "Show or hide this help"),
)
_KEY_OF = {k.action: k.key for k in KEYMAP}


def button(action: str, label: str, *, name: str = "", value: str = "", kind: str = "submit") -> str:
    """A button wired to the keymap: its hint and ``aria-keyshortcuts`` come from ``KEYMAP``."""
    key = _KEY_OF.get(action)
    hint = f' <kbd aria-hidden="true">{h(key)}</kbd>' if key else ""
    shortcut = f' aria-keyshortcuts="{h(key)}"' if key else ""
    named = f' name="{h(name)}" value="{h(value)}"' if name else ""
    return f'<button type="{kind}" data-action="{h(action)}"{shortcut}{named}>{h(label)}{hint}</button>'


def csrf_field(session: Session) -> str:
    return f'<input type="hidden" name="csrf" value="{h(session.csrf)}">'


def _help_overlay() -> str:
    rows = "".join(f"<tr><th scope='row'><kbd>{h(k.key)}</kbd></th><td>{h(k.help)}</td></tr>" for k in KEYMAP)
    return f"""
<div id="help" class="overlay" role="dialog" aria-modal="true" aria-labelledby="help-title" hidden>
  <div class="dialog">
    <h2 id="help-title">Keyboard shortcuts</h2>
    <table><caption class="visually-hidden">Single-key shortcuts</caption>{rows}</table>
    <p>Shortcuts are off while you type in a field; press Escape to leave the field.</p>
    <label><input type="checkbox" id="keys-enabled"> Single-key shortcuts on</label>
    <p><button type="button" data-close>Close</button></p>
  </div>
</div>"""


NAV = (
    ("queue", "/console/queue", "Queue", False),
    ("rules", "/console/rules", "Rules", True),
    ("categories", "/console/categories", "Categories", True),
    ("settings", "/console/settings", "Settings", True),
    ("budgets", "/console/budgets", "Budgets", True),
    ("sequence", "/console/sequence", "Review sequences", True),
    ("dead-letters", "/console/dead-letters", "Dead letters", True),
)


def page(
    title: str,
    body: str,
    *,
    session: Session | None = None,
    active: str = "",
    status: int = 200,
    announce: str = "",
    extra_headers: dict[str, str] | None = None,
    toast: str = "",
) -> HTMLResponse:
    """A whole console page. ``announce`` is read out by the aria-live region once the page loads;
    ``toast``: a control beside it (the undo of a decision)."""
    nav = ""
    if session is not None:
        links = "".join(
            f'<li><a href="{href}"{" aria-current=page" if name == active else ""}>{h(label)}</a></li>'
            for name, href, label, admin in NAV
            if session.is_admin or not admin
        )
        who = f"Signed in as {session.name or session.key_id} ({session.principal.actor_kind} key)"
        nav = f"""
<header class="bar">
  <a class="brand" href="/console/queue">reviewloop</a>
  <nav aria-label="Console"><ul>{links}</ul></nav>
  <form method="post" action="/console/sign-out" class="inline">{csrf_field(session)}
    <span class="who">{h(who)}</span> <button type="submit">Sign out</button></form>
  <button type="button" class="help-button" data-action="help" aria-keyshortcuts="?">Shortcuts <kbd aria-hidden="true">?</kbd></button>
</header>"""
    keymap = json.dumps({k.key: k.action for k in KEYMAP})
    document = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{h(title)} · reviewloop console</title>
<link rel="icon" href="/console/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/console/static/console.css">
<script src="/console/static/console.js" defer></script>
</head>
<body data-announce="{h(announce)}" data-keymap="{h(keymap)}">
<a class="skip" href="#main">Skip to content</a>
{nav}
<main id="main" tabindex="-1"{" data-autofocus" if announce else ""}>
<h1>{h(title)}</h1>
{body}
</main>
<div class="toasts">{toast}<div id="live" class="toast" role="status" aria-live="polite"></div></div>
{_help_overlay() if session is not None else ""}
</body>
</html>"""
    headers = {**SECURITY_HEADERS, **(extra_headers or {})}
    return HTMLResponse(document, status_code=status, headers=headers)


def table(
    caption: str,
    head: Iterable[str],
    rows: Iterable[str],
    *,
    empty: str = "Nothing here.",
    live: str = "",
    fed: bool = False,
) -> str:
    """A captioned table, or ``empty`` when there are no rows. ``live``: the event stream that keeps it
    current; ``fed``: another table's stream adds rows to it. Either way the table is rendered, hidden,
    even when empty, so rows can arrive."""
    rows = list(rows)
    attrs = f' data-live="{h(live)}"' if live else ""
    if not rows and not (live or fed):
        return f"<p>{h(empty)}</p>"
    cols = "".join(f'<th scope="col">{h(c)}</th>' for c in head)
    table_ = (
        f"<table{attrs}{'' if rows else ' hidden'}><caption>{h(caption)}</caption><thead><tr>{cols}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return table_ if rows else f"<p>{h(empty)}</p>{table_}"


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


def when(iso: str) -> str:
    """A moment as a ``<time>``: relative ("3 min ago"), the exact time on hover. The browser rewrites
    both in the reader's own time zone and keeps the relative one current (console.js)."""
    if not iso:
        return ""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return h(iso)
    exact = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    ago = relative((datetime.now(UTC) - moment).total_seconds())
    return f'<time datetime="{h(iso)}" title="{h(exact)}">{h(ago)}</time>'


def error_box(message: str) -> str:
    return f'<div class="error" role="alert"><p>{h(message)}</p></div>'
