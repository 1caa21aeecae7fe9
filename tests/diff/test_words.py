"""The word-level diff a rule proposed from an edit quotes (issue 38): its segments put back together are
exactly both texts, and a changed segment names only words that differ."""

from __future__ import annotations

from diff.domain.words import word_diff
from hypothesis import given
from hypothesis import strategies as st

texts = st.lists(
    st.sampled_from(["Hi", "Bob,", "let", "me", "know", "thoughts.", "Thursday", " ", "\n", "  "]),
    max_size=30,
).map("".join)


@given(texts, texts)
def test_the_segments_are_both_texts_again(before: str, after: str) -> None:
    segments = word_diff(before, after)
    assert "".join(s.before for s in segments) == before
    assert "".join(s.after for s in segments) == after
    assert all(s.op in ("equal", "replace", "insert", "delete") for s in segments)
    for s in segments:
        if s.op == "equal":
            assert s.before.split() == s.after.split()
        else:
            assert s.before.split() != s.after.split()


@given(texts)
def test_a_text_against_itself_is_one_run_of_equal_words(text: str) -> None:
    assert all(s.op == "equal" for s in word_diff(text, text))


def test_a_replaced_phrase_is_one_segment_with_its_words() -> None:
    segments = word_diff("Hi Bob, let me know your thoughts.\nBest", "Hi Bob, can you do Thursday?\nBest")
    changed = [(s.op, s.before.strip(), s.after.strip()) for s in segments if s.op != "equal"]
    assert changed == [("replace", "let me know your thoughts.", "can you do Thursday?")]
    assert [s.op for s in word_diff("a b", "a b c")] == ["equal", "insert"]
