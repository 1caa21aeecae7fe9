"""The HTML part of an edited draft: regenerated from the reviewer's text, or the reviewer's own HTML
sanitized, so an edit covers every part that is delivered (issue 38: an edit of the text once left the
agent's HTML, hidden lines and all, as the alternative most clients show)."""

from __future__ import annotations

import html

import nh3

# What a reviewer's own HTML may keep: ammonia's safe tags and attributes, inline styles limited to
# presentation (no display, visibility, opacity, position or size tricks that hide text), no remote URLs
# but links.
_STYLE_PROPERTIES = frozenset(
    {
        "color",
        "background-color",
        "font-family",
        "font-weight",
        "font-style",
        "text-align",
        "text-decoration",
        "line-height",
        "margin",
        "margin-top",
        "margin-bottom",
        "padding",
        "border",
        "border-collapse",
    }
)
_STYLED = {"style"}


def html_of_text(text: str) -> str:
    """``text`` as a minimal HTML part: paragraphs at blank lines, line breaks kept, everything escaped."""
    paragraphs = [p for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]
    body = "\n".join(
        "<p>" + "<br>\n".join(html.escape(line) for line in p.strip("\n").split("\n")) + "</p>"
        for p in paragraphs
    )
    return f"<!doctype html>\n<html><body>\n{body}\n</body></html>\n"


def sanitize_html(markup: str) -> str:
    """A reviewer's HTML part without scripts, event handlers, remote images or hiding styles."""
    attributes = {tag: set(_STYLED) for tag in nh3.ALLOWED_TAGS}
    attributes["a"] = {"href", "title", "style"}
    attributes["img"] = {"alt", "width", "height", "style"}  # no src: a reviewer's edit loads nothing
    return nh3.clean(
        markup,
        attributes=attributes,
        filter_style_properties=set(_STYLE_PROPERTIES),
        url_schemes={"https", "http", "mailto"},
    )
