"""What a human cannot see in rendered mail: the review page's warning panel. Pure functions of a review
(as ``gateway.translate.reviews.as_review`` answers it).

Hidden text is found by parsing the HTML part the way a mail client lays it out: its ``<style>`` blocks
applied to the elements (css-inline), each element's declarations parsed (tinycss2), colours and sizes
inherited down the tree, so white-on-white, 1 px, transparent and off-screen text are caught and a visible
sentence that merely says "hidden" is not. Look-alike domains are compared by a UTS #39 skeleton built
from the Unicode confusables data that ``confusable_homoglyphs`` ships, against well-known domains and
the draft's own; punycode is decoded to what it shows (``idna``).
"""

from __future__ import annotations

import difflib
import json
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import confusable_homoglyphs  # type: ignore[import-untyped]
import css_inline
import idna
import tinycss2  # type: ignore[import-untyped]
import tinycss2.color4  # type: ignore[import-untyped]
from bs4 import BeautifulSoup
from bs4.element import NavigableString, Tag
from confusable_homoglyphs import categories, confusables

ZERO_WIDTH = {"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e"}
BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}

# Domains phishing imitates most; a draft's recipients are also compared with each other and its sender.
WELL_KNOWN_DOMAINS = (
    "microsoft.com",
    "office.com",
    "outlook.com",
    "live.com",
    "paypal.com",
    "apple.com",
    "icloud.com",
    "google.com",
    "gmail.com",
    "amazon.com",
    "facebook.com",
    "linkedin.com",
    "github.com",
    "dropbox.com",
    "docusign.com",
    "stripe.com",
    "wellsfargo.com",
    "chase.com",
    "bankofamerica.com",
    "netflix.com",
    "adobe.com",
    "salesforce.com",
    "slack.com",
    "zoom.us",
)


def _name(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}"


def invisible_characters(field: str, text: str) -> list[str]:
    """Zero-width and bidi controls in ``text``, named with their position."""
    found = []
    for index, char in enumerate(text):
        if char in ZERO_WIDTH:
            found.append(f"{field}: zero-width character {_name(char)} at position {index}")
        elif char in BIDI:
            found.append(f"{field}: bidi control {_name(char)} at position {index}")
    return found


# --- look-alike domains -----------------------------------------------------------------------------


@cache
def _prototypes() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """From the confusables data: each character's prototype (an ASCII lowercase letter or digit where
    one is among its homoglyphs), and the multi-letter ASCII sequences that read as one letter
    ("rn" as "m")."""
    path = Path(confusable_homoglyphs.__file__).parent / "confusables.json"
    data: dict[str, list[dict[str, str]]] = json.loads(path.read_text(encoding="utf-8"))
    single: dict[str, str] = {}
    sequences: list[tuple[str, str]] = []
    for char, glyphs in data.items():
        if len(char) != 1:
            continue
        names = [g["c"] for g in glyphs]
        ascii_ = [c for c in names if len(c) == 1 and c.isascii() and c.isalpha()]
        # A lowercase ASCII letter among its homoglyphs first, else an uppercase one folded ("0" -> "O").
        letters = sorted(c for c in ascii_ if c.islower()) or sorted(c.lower() for c in ascii_)
        if letters and not (char.isascii() and char.islower()):
            single[char] = letters[0]
        if char.isascii() and char.islower():
            sequences += [(n, char) for n in names if len(n) > 1 and n.isascii() and n.isalnum()]
    return single, sorted(sequences, key=lambda s: -len(s[0]))


def skeleton(domain: str) -> str:
    """The domain as a reader reads it (UTS #39's skeleton, in spirit): NFKC, case-folded, every
    confusable character mapped to its prototype, then look-alike letter runs to the letter."""
    single, sequences = _prototypes()
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", domain).casefold())
    text = "".join(single.get(c, c) for c in text if not unicodedata.combining(c))
    for run, letter in sequences:
        text = text.replace(run, letter)
    return text


def decoded(domain: str) -> str:
    """A punycode (``xn--``) domain as a mail client shows it; the domain itself when it is not one."""
    try:
        return idna.decode(domain)
    except (idna.IDNAError, UnicodeError, ValueError):
        return domain


def _scripts(label: str) -> str:
    aliases = {categories.alias(c) for c in label if c.isalpha()}
    return ", ".join(sorted(aliases))


def lookalike_domains(addresses: Sequence[str], known: Sequence[str] = ()) -> list[str]:
    """Recipient domains that read like a well-known domain, the sender's or another recipient's but
    are not it; punycode decoded to what it shows; labels that mix scripts."""
    domains = sorted({a.rpartition("@")[2].lower() for a in addresses if "@" in a})
    shown = {d: decoded(d) for d in domains}
    reference = sorted({*WELL_KNOWN_DOMAINS, *domains, *(k.lower() for k in known if k)})
    found = []
    for domain in domains:
        shows = shown[domain]
        if shows != domain or not domain.isascii():
            foreign = [f"{c} {_name(c)}" for c in shows if not c.isascii()]
            found.append(
                f"recipient domain {domain} is an internationalized name: it shows as {shows}"
                + (f" ({'; '.join(foreign)})" if foreign else "")
            )
        mixed = [label for label in shows.split(".") if confusables.is_mixed_script(label)]
        if mixed:
            found.append(
                f"recipient domain {shows} mixes scripts in {', '.join(mixed)} ({_scripts(''.join(mixed))})"
            )
        own = skeleton(shows)
        twins = [o for o in reference if o not in (domain, shows) and skeleton(decoded(o)) == own]
        if twins:
            found.append(f"recipient domain {shows} looks like {', '.join(twins)}")
    return found


# --- hidden text in the HTML part ---------------------------------------------------------------------


@dataclass(frozen=True)
class Hidden:
    """Text of the HTML part a reader does not see, and why."""

    reason: str
    text: str


_INLINER = css_inline.CSSInliner(load_remote_stylesheets=False, keep_style_tags=False, keep_link_tags=False)
_INHERITED = ("color", "font-size")
_SKIPPED = {"script", "style", "head", "title", "meta", "link", "template", "noscript"}
_BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "blockquote", "pre"}
_LENGTH = re.compile(r"^(-?\d*\.?\d+)\s*(px|pt|em|rem|%|)$")
_WHITE_BG = tinycss2.color4.parse_color("#ffffff")


def _declarations(style: str) -> dict[str, str]:
    out = {}
    for decl in tinycss2.parse_blocks_contents(style, skip_comments=True, skip_whitespace=True):
        if decl.type == "declaration":
            out[decl.lower_name] = tinycss2.serialize(decl.value).strip().lower()
    return out


def _px(value: str, inherited_px: float) -> float | None:
    match = _LENGTH.match(value.replace("!important", "").strip())
    if not match:
        return None
    number, unit = float(match.group(1)), match.group(2)
    return {
        "px": number,
        "": number,
        "pt": number * 4 / 3,
        "em": number * inherited_px,
        "rem": number * 16,
        "%": number * inherited_px / 100,
    }[unit]


def _color(value: str) -> Any:
    try:
        return tinycss2.color4.parse_color(value.replace("!important", "").strip())
    except Exception:  # an unparseable colour is the client's default: not hiding anything
        return None


def _same_color(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    ra, rb = a.to("srgb"), b.to("srgb")
    return all(abs(x - y) < 0.04 for x, y in zip(ra.coordinates, rb.coordinates, strict=True))


def _why_hidden(tag: Tag, style: dict[str, str], font_px: float, color: Any, background: Any) -> str:
    """Why the element's text is not seen ("" when it is), from its own declarations and what it
    inherits (font size, colour) and sits on (the nearest background)."""
    if tag.has_attr("hidden"):
        return "hidden attribute"
    if style.get("display", "").startswith("none"):
        return "display:none"
    if style.get("visibility", "").split()[:1] in (["hidden"], ["collapse"]):
        return "visibility:hidden"
    opacity = _px(style.get("opacity", "1"), 1.0)
    if opacity is not None and opacity <= 0.05:
        return "opacity:0"
    if font_px <= 2:
        return f"font-size {font_px:g}px"
    for name in ("max-height", "height", "max-width", "width"):
        size = _px(style.get(name, ""), font_px)
        if size is not None and size <= 1 and "hidden" in style.get("overflow", ""):
            return f"{name}:0 with overflow hidden"
    if style.get("position", "") in ("absolute", "fixed"):
        for name in ("left", "top", "right"):
            offset = _px(style.get(name, ""), font_px)
            if offset is not None and offset <= -500:
                return f"off-screen ({name}:{style[name]})"
    indent = _px(style.get("text-indent", ""), font_px)
    if indent is not None and indent <= -500:
        return f"off-screen (text-indent:{style['text-indent']})"
    clip = style.get("clip", "") + style.get("clip-path", "")
    if "rect(0" in clip.replace(" ", "") or "inset(50%" in clip:
        return "clipped away"
    if color is not None and color.alpha <= 0.05:
        return "transparent text"
    if _same_color(color, background):
        return "text the colour of its background"
    return ""


def _walk(
    tag: Tag, font_px: float, color: Any, background: Any, hidden: list[Hidden], visible: list[str]
) -> None:
    for child in tag.children:
        if isinstance(child, NavigableString):
            if type(child) is NavigableString:
                visible.append(str(child))
            continue
        if not isinstance(child, Tag) or child.name in _SKIPPED:
            continue
        style = _declarations(str(child.get("style") or ""))
        size = _px(style.get("font-size", ""), font_px)
        child_font = size if size is not None else font_px
        child_color = _color(style["color"]) if "color" in style else color
        if child.has_attr("color") and child.name == "font":
            child_color = _color(str(child["color"]))
        bg_value = style.get("background-color") or style.get("background", "").split(" ")[0]
        if not bg_value and child.has_attr("bgcolor"):
            bg_value = str(child["bgcolor"])
        bg = _color(bg_value) if bg_value else None
        child_background = bg if bg is not None and bg.alpha > 0.05 else background
        reason = _why_hidden(child, style, child_font, child_color, child_background)
        if reason:
            text = " ".join(child.get_text(" ").split())
            if text:
                hidden.append(Hidden(reason, text))
            continue
        if child.name in _BLOCK:
            visible.append("\n")
        _walk(child, child_font, child_color, child_background, hidden, visible)
        if child.name in _BLOCK:
            visible.append("\n")


def read_html(body_html: str) -> tuple[list[Hidden], str]:
    """The HTML part's hidden texts (with why) and the text a reader sees."""
    try:
        inlined = _INLINER.inline(body_html)
    except Exception:  # css-inline refuses malformed CSS: read the element styles as written
        inlined = body_html
    soup = BeautifulSoup(inlined, "html.parser")
    hidden: list[Hidden] = []
    visible: list[str] = []
    root = soup.body or soup
    _walk(root, 16.0, _color("#000000"), _WHITE_BG, hidden, visible)
    return hidden, "".join(visible)


def hidden_html(body_html: str | None) -> list[Hidden]:
    return read_html(body_html)[0] if body_html else []


def _words(text: str) -> list[str]:
    return re.findall(r"\w[\w'\u2019.,:;!?-]*", text)


def parts_disagree(body_text: str, body_html: str | None) -> list[str]:
    """Where what the HTML part shows differs from the text part (a client shows one or the other):
    the differing words, at most a few runs."""
    if not body_html:
        return []
    _, seen = read_html(body_html)
    a, b = _words(body_text), _words(seen)
    folded_a, folded_b = [w.casefold() for w in a], [w.casefold() for w in b]
    if folded_a == folded_b:
        return []
    runs = []
    matcher = difflib.SequenceMatcher(a=folded_a, b=folded_b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        only_text, only_html = " ".join(a[i1:i2]), " ".join(b[j1:j2])
        runs.append(
            " / ".join(
                x
                for x in (
                    f'text part only: "{only_text}"' if only_text else "",
                    f'HTML part only: "{only_html}"' if only_html else "",
                )
                if x
            )
        )
    more = f" (and {len(runs) - 3} more)" if len(runs) > 3 else ""
    return ["the text and HTML parts say different things: " + "; ".join(runs[:3]) + more]


def added_recipients(review: dict[str, Any]) -> list[str]:
    """Recipients the latest revision added to the one before it (from its revision turn's diff)."""
    turns = [t for t in review.get("turns") or [] if t["turn_type"] == "revision" and t.get("diff_json")]
    if not turns:
        return []
    added = []
    for hunk in turns[-1]["diff_json"]["hunks"]:
        if hunk["field"] in ("to", "cc", "bcc"):
            before = set(hunk["before"] or []) if isinstance(hunk["before"], list) else set()
            after = hunk["after"] if isinstance(hunk["after"], list) else []
            added += [f"{hunk['field']}: {a} added since the last revision" for a in after if a not in before]
    return added


def _hidden_lines(hidden: list[Hidden]) -> Iterator[str]:
    for item in hidden:
        text = item.text if len(item.text) <= 80 else item.text[:77] + "…"
        yield f'HTML part hides text ({item.reason}): "{text}"'


def unnamed_rule_snapshot(review: dict[str, Any]) -> list[str]:
    """The draft names no rule snapshot (sent without a composition_token): nothing says its agent read the
    rules in force, so the reviewer checks them (issue 34). Not one of ``warnings``: it is about how the
    draft was composed, not what its rendered mail hides (an edit does not clear it)."""
    if review.get("rule_snapshot_named", True):
        return []
    return [
        "its agent named no rule snapshot (no composition_token): nothing says it applied the rules in force "
        f"(high-water {review.get('rule_high_water', 0)} when it was written); check them before approving"
    ]


def warnings(review: dict[str, Any], known_domains: Sequence[str] = ()) -> list[str]:
    """Every warning for ``review``, most alarming first."""
    recipients = [*review["to"], *review["cc"], *review["bcc"]]
    found = []
    for field in ("subject", "body_text", "body_html"):
        found += invisible_characters(field, review.get(field) or "")
    for address in recipients:
        found += invisible_characters("recipient", address)
    sender = (review.get("from_address") or "").rpartition("@")[2]
    found += lookalike_domains(recipients, [*known_domains, sender])
    found += _hidden_lines(hidden_html(review.get("body_html")))
    found += parts_disagree(review.get("body_text") or "", review.get("body_html"))
    found += added_recipients(review)
    return found
