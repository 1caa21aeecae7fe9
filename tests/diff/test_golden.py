"""Golden diffs: the spec's canonical diff_json and a set of reviewer edits, byte for byte."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
from diff.domain.fields import Attachment, MessageFields
from diff.domain.message import compute

BODY = (
    "Hi Dana,\n"
    "\n"
    "Thanks for the call today. It was great to hear about the Q3 pilot.\n"
    "\n"
    "Our team can start onboarding next week.\n"
    "We will send the contract by Friday.\n"
    "\n"
    "Let me know your thoughts.\n"
    "\n"
    "Best,\n"
    "Sam\n"
)
DRAFT = MessageFields(subject="Q3 pilot", body_text=BODY, to=("vp@acme.com",))


def edited(**changes: Any) -> MessageFields:
    return replace(DRAFT, **changes)


def test_spec_canonical_example() -> None:
    # Spec 000, "diff_json": the reviewer changed the subject and replaced the closing line.
    before = MessageFields(subject="Q3 pilot", body_text="Let me know your thoughts.")
    after = MessageFields(subject="Q3 pilot: Thursday?", body_text="Can you do Thursday 2pm?")
    diff = compute(before, after)
    body = orjson.loads(diff.diff_json)
    assert body["fields_changed"] == ["subject", "body_text"]
    spec_hunk = {
        "field": "body_text",
        "op": "replace",
        "before": "Let me know your thoughts.",
        "after": "Can you do Thursday 2pm?",
    }
    assert {k: body["hunks"][1][k] for k in spec_hunk} == spec_hunk
    assert diff.diff_json == (
        '{"fields_changed":["subject","body_text"],"hunks":['
        '{"field":"subject","op":"replace","before":"Q3 pilot","after":"Q3 pilot: Thursday?"},'
        '{"field":"body_text","op":"replace","before":"Let me know your thoughts.",'
        '"after":"Can you do Thursday 2pm?","before_start":1,"after_start":1}]}'
    )
    assert diff.diff_unified == (
        "--- a/subject\n"
        "+++ b/subject\n"
        "@@ -1 +1 @@\n"
        "-Q3 pilot\n"
        "+Q3 pilot: Thursday?\n"
        "--- a/body_text\n"
        "+++ b/body_text\n"
        "@@ -1 +1 @@\n"
        "-Let me know your thoughts.\n"
        "\\ No newline at end of file\n"
        "+Can you do Thursday 2pm?\n"
        "\\ No newline at end of file\n"
    )


def test_subject_only_edit() -> None:
    diff = compute(DRAFT, edited(subject="Q3 pilot: next steps"))
    assert diff.fields_changed == ("subject",)
    assert diff.diff_json == (
        '{"fields_changed":["subject"],"hunks":[{"field":"subject","op":"replace",'
        '"before":"Q3 pilot","after":"Q3 pilot: next steps"}]}'
    )
    assert diff.diff_unified == (
        "--- a/subject\n+++ b/subject\n@@ -1 +1 @@\n-Q3 pilot\n+Q3 pilot: next steps\n"
    )


def test_one_sentence_edit_is_one_line_hunk_with_context() -> None:
    after = edited(body_text=BODY.replace("Let me know your thoughts.", "Can you do Thursday 2pm?"))
    diff = compute(DRAFT, after)
    assert diff.diff_json == (
        '{"fields_changed":["body_text"],"hunks":[{"field":"body_text","op":"replace",'
        '"before":"Let me know your thoughts.\\n","after":"Can you do Thursday 2pm?\\n",'
        '"before_start":8,"after_start":8}]}'
    )
    assert diff.diff_unified == (
        "--- a/body_text\n"
        "+++ b/body_text\n"
        "@@ -5,7 +5,7 @@\n"
        " Our team can start onboarding next week.\n"
        " We will send the contract by Friday.\n"
        " \n"
        "-Let me know your thoughts.\n"
        "+Can you do Thursday 2pm?\n"
        " \n"
        " Best,\n"
        " Sam\n"
    )


def test_moved_paragraph_is_a_delete_and_an_insert_of_the_same_lines() -> None:
    paragraphs = BODY.split("\n\n")
    moved = "\n\n".join([paragraphs[0], paragraphs[2], paragraphs[1], *paragraphs[3:]])
    diff = compute(DRAFT, edited(body_text=moved))
    paragraph = "Thanks for the call today. It was great to hear about the Q3 pilot.\n\n"
    assert orjson.loads(diff.diff_json) == {
        "fields_changed": ["body_text"],
        "hunks": [
            {
                "field": "body_text",
                "op": "delete",
                "before": paragraph,
                "after": "",
                "before_start": 3,
                "after_start": 3,
            },
            {
                "field": "body_text",
                "op": "insert",
                "before": "",
                "after": paragraph,
                "before_start": 8,
                "after_start": 6,
            },
        ],
    }
    # The same hunk GNU `diff -u` prints for these two files.
    assert diff.diff_unified == (
        "--- a/body_text\n"
        "+++ b/body_text\n"
        "@@ -1,10 +1,10 @@\n"
        " Hi Dana,\n"
        " \n"
        "-Thanks for the call today. It was great to hear about the Q3 pilot.\n"
        "-\n"
        " Our team can start onboarding next week.\n"
        " We will send the contract by Friday.\n"
        " \n"
        "+Thanks for the call today. It was great to hear about the Q3 pilot.\n"
        "+\n"
        " Let me know your thoughts.\n"
        " \n"
        " Best,\n"
    )


def test_recipients_added_are_one_hunk_each() -> None:
    diff = compute(DRAFT, edited(to=("vp@acme.com", "cto@acme.com"), cc=("sam@ours.com",)))
    assert diff.fields_changed == ("to", "cc")
    assert diff.diff_json == (
        '{"fields_changed":["to","cc"],"hunks":['
        '{"field":"to","op":"insert","before":"","after":"cto@acme.com","before_start":2,"after_start":2},'
        '{"field":"cc","op":"insert","before":"","after":"sam@ours.com","before_start":1,"after_start":1}]}'
    )
    assert diff.diff_unified == (
        "--- a/to\n+++ b/to\n@@ -1 +1,2 @@\n vp@acme.com\n+cto@acme.com\n"
        "--- a/cc\n+++ b/cc\n@@ -0,0 +1 @@\n+sam@ours.com\n"
    )


def test_replaced_attachment_is_a_removal_and_an_addition() -> None:
    logo = Attachment("logo.png", "image/png", "3" * 64)
    before = edited(attachments=(Attachment("pilot.pdf", "application/pdf", "1" * 64), logo))
    after = edited(attachments=(Attachment("pilot.pdf", "application/pdf", "2" * 64), logo))
    diff = compute(before, after)
    old = "pilot.pdf (application/pdf; sha256=" + "1" * 64 + ")"
    new = "pilot.pdf (application/pdf; sha256=" + "2" * 64 + ")"
    assert diff.fields_changed == ("attachments",)
    assert orjson.loads(diff.diff_json)["hunks"] == [
        {
            "field": "attachments",
            "op": "delete",
            "before": old,
            "after": "",
            "before_start": 1,
            "after_start": 1,
        },
        {
            "field": "attachments",
            "op": "insert",
            "before": "",
            "after": new,
            "before_start": 2,
            "after_start": 1,
        },
    ]
    logo_line = "logo.png (image/png; sha256=" + "3" * 64 + ")"
    assert diff.diff_unified == (
        f"--- a/attachments\n+++ b/attachments\n@@ -1,2 +1,2 @@\n-{old}\n+{new}\n {logo_line}\n"
    )


def test_changed_header_value_is_a_replace_and_new_header_an_insert() -> None:
    before = edited(headers={"X-Campaign": "q3", "Importance": "low"})
    after = edited(headers={"X-Campaign": "q3-pilot", "Importance": "low", "In-Reply-To": "<m1@x>"})
    diff = compute(before, after)
    assert diff.diff_json == (
        '{"fields_changed":["headers"],"hunks":['
        '{"field":"headers","op":"insert","before":"","after":"In-Reply-To: <m1@x>",'
        '"before_start":2,"after_start":2},'
        '{"field":"headers","op":"replace","before":"X-Campaign: q3","after":"X-Campaign: q3-pilot",'
        '"before_start":2,"after_start":3}]}'
    )


def test_crlf_to_lf_only_is_not_a_change_but_the_hunk_says_so() -> None:
    before = edited(body_text="Hi Dana,\r\n\r\nLet me know your thoughts.\r\n")
    after = edited(body_text="Hi Dana,\n\nLet me know your thoughts.\n")
    diff = compute(before, after)
    assert diff.fields_changed == ()
    assert orjson.loads(diff.diff_json) == {
        "fields_changed": [],
        "hunks": [
            {
                "field": "body_text",
                "op": "replace",
                "before": "Hi Dana,\r\n\r\nLet me know your thoughts.\r\n",
                "after": "Hi Dana,\n\nLet me know your thoughts.\n",
                "before_start": 1,
                "after_start": 1,
                "line_endings_only": True,
            }
        ],
    }


def test_crlf_lines_around_a_real_edit_are_flagged_apart_from_it() -> None:
    diff = compute(edited(body_text="Hi Dana,\r\nThanks.\r\n"), edited(body_text="Hi Dana,\nThanks a lot.\n"))
    assert diff.fields_changed == ("body_text",)
    hunks = orjson.loads(diff.diff_json)["hunks"]
    assert [(h["before"], h["after"], h.get("line_endings_only", False)) for h in hunks] == [
        ("Hi Dana,\r\n", "Hi Dana,\n", True),
        ("Thanks.\r\n", "Thanks a lot.\n", False),
    ]
    # Raw lines, as GNU diff writes them: the unified diff stays a patch `patch` applies.
    assert diff.diff_unified == (
        "--- a/body_text\n+++ b/body_text\n@@ -1,2 +1,2 @@\n"
        "-Hi Dana,\r\n+Hi Dana,\n-Thanks.\r\n+Thanks a lot.\n"
    )


def test_identical_messages_have_no_diff() -> None:
    diff = compute(DRAFT, edited())
    assert diff.fields_changed == ()
    assert diff.diff_json == '{"fields_changed":[],"hunks":[]}'
    assert diff.diff_unified == ""
