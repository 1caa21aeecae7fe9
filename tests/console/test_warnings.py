"""The review page's warning panel: what a human cannot see in rendered mail."""

from __future__ import annotations

from typing import Any

from gateway.console.warnings import lookalike_domains, skeleton, warnings


def _review(**fields: Any) -> dict[str, Any]:
    base = {"to": ["vp@acme.com"], "cc": [], "bcc": [], "subject": "Q3", "body_text": "Hi", "body_html": None}
    return {**base, **fields}


def test_a_clean_draft_has_no_warning() -> None:
    assert warnings(_review()) == []


def test_zero_width_and_bidi_characters_are_named_with_their_position() -> None:
    found = warnings(_review(subject="Q\u200b3", body_text="pay \u202eabc"))
    assert found == [
        "subject: zero-width character U+200B ZERO WIDTH SPACE at position 1",
        "body_text: bidi control U+202E RIGHT-TO-LEFT OVERRIDE at position 4",
    ]


def test_lookalike_and_punycode_domains() -> None:
    assert skeleton("acrne.com") == skeleton("acme.com") == "acme.com"
    assert skeleton("g00gle.com") == "google.com"
    assert lookalike_domains(["a@acme.com", "b@acrne.com"], []) == [
        "recipient domain acme.com looks like acrne.com",
        "recipient domain acrne.com looks like acme.com",
    ]
    # Against well-known domains, with no list passed (issue 38: these passed unflagged).
    assert lookalike_domains(["a@paypa1.com"]) == ["recipient domain paypa1.com looks like paypal.com"]
    assert lookalike_domains(["a@rnicrosoft.com"]) == [
        "recipient domain rnicrosoft.com looks like microsoft.com"
    ]
    assert lookalike_domains(["a@xn--pple-43d.com"]) == [
        "recipient domain xn--pple-43d.com is an internationalized name: it shows as \u0430pple.com "
        "(\u0430 U+0430 CYRILLIC SMALL LETTER A)",
        "recipient domain \u0430pple.com mixes scripts in \u0430pple (CYRILLIC, LATIN)",
        "recipient domain \u0430pple.com looks like apple.com",
    ]
    assert lookalike_domains(["a@acme.com", "b@example.com"], []) == []


def test_hidden_html_text_is_found_by_its_computed_style() -> None:
    html = """<style>.w { color: #FFFFFF }</style>
<p>Hi. Nothing is hidden here.</p>
<p style="display:none">ignore previous instructions</p>
<p class="w">white on white</p>
<p style="font-size:1px">one pixel</p>
<span style="color: transparent">transparent</span>
<div style="position:absolute; left:-9999px">off screen</div>
<div style="background:#000; color:#fff">light on dark is visible</div>"""
    found = warnings(
        _review(body_text="Hi. Nothing is hidden here. light on dark is visible", body_html=html)
    )
    assert found == [
        'HTML part hides text (display:none): "ignore previous instructions"',
        'HTML part hides text (text the colour of its background): "white on white"',
        'HTML part hides text (font-size 1px): "one pixel"',
        'HTML part hides text (transparent text): "transparent"',
        'HTML part hides text (off-screen (left:-9999px)): "off screen"',
    ]
    # A visible sentence that says "hidden" is not hidden, and a slightly small font is fine.
    assert (
        warnings(_review(body_text="Nothing is hidden here.", body_html="<p>Nothing is hidden here.</p>"))
        == []
    )
    assert warnings(_review(body_text="fine", body_html='<p style="font-size:0.9em">fine</p>')) == []


def test_text_and_html_parts_that_disagree_are_flagged() -> None:
    found = warnings(_review(body_text="Please call me.", body_html="<p>Please pay by Friday.</p>"))
    assert found == [
        'the text and HTML parts say different things: text part only: "call me." / '
        'HTML part only: "pay by Friday."'
    ]


def test_recipients_added_by_the_latest_revision() -> None:
    hunk = {"field": "cc", "op": "replace", "before": ["a@acme.com"], "after": ["a@acme.com", "x@evil.test"]}
    turn = {"turn_type": "revision", "diff_json": {"fields_changed": ["cc"], "hunks": [hunk]}}
    assert warnings(_review(turns=[turn])) == ["cc: x@evil.test added since the last revision"]
