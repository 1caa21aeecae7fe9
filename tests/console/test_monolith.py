"""Two of the console's browser tests against monolithic mode (``reviewloop up --target all``): every part
in one process, the contexts calling each other through the in-process channel. The whole console suite
runs so with ``REVIEWLOOP_TEST_TARGET=all``; these keep the mode in every run."""

from __future__ import annotations

from tests.console.test_console import (
    test_edit_saved_as_category_rule_then_approved,
    test_queue_is_live_and_every_page_is_accessible,
)

# What ``console_stack`` starts for this module.
STACK_TARGET = "all"

__all__ = [
    "test_edit_saved_as_category_rule_then_approved",
    "test_queue_is_live_and_every_page_is_accessible",
]
