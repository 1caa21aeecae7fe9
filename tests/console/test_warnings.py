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
    assert lookalike_domains(["a@paypa1.com"], ["paypal.com"]) == [
        "recipient domain paypa1.com looks like paypal.com"
    ]
    assert lookalike_domains(["a@xn--pple-43d.com"], []) == [
        "recipient domain xn--pple-43d.com is an internationalized (punycode) name"
    ]
    assert lookalike_domains(["a@acme.com", "b@example.com"], []) == []


def test_hidden_html_text_is_flagged() -> None:
    found = warnings(_review(body_html='<p>Hi</p><span style="font-size:0">wire it</span>'))
    assert found == ["HTML part hides text (font-size:0)"]
    assert warnings(_review(body_html='<p style="font-size:0.9em">fine</p>')) == []


def test_recipients_added_by_the_latest_revision() -> None:
    hunk = {"field": "cc", "op": "replace", "before": ["a@acme.com"], "after": ["a@acme.com", "x@evil.test"]}
    turn = {"turn_type": "revision", "diff_json": {"fields_changed": ["cc"], "hunks": [hunk]}}
    assert warnings(_review(turns=[turn])) == ["cc: x@evil.test added since the last revision"]
