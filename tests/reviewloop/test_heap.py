"""A booted process keeps its boot heap out of the cyclic collector's walks (issue 18): a full collection
of the gateway's whole heap took up to 144 ms of CPU, and every request it held waited for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# In a process of its own: freezing the test runner's heap would change every test after this one.
_BOOT_AND_SETTLE = """
import gc, json
import gateway.asgi, review_state.server, nudge.server  # a boot heap: routes, shapes, descriptors, tables
from reviewloop.service import GC_THRESHOLD, settle_heap
before = len(gc.get_objects())
settle_heap()
print(json.dumps({"before": before, "walked": len(gc.get_objects()), "frozen": gc.get_freeze_count(),
                  "threshold": gc.get_threshold(), "expected": GC_THRESHOLD}))
"""


def test_after_boot_a_full_collection_walks_only_what_was_made_since() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _BOOT_AND_SETTLE],
        capture_output=True,
        check=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    heap = json.loads(run.stdout)
    assert heap["before"] > 100_000, heap  # the boot heap a full collection used to walk
    assert heap["frozen"] >= heap["before"] * 0.9, heap
    assert heap["walked"] < heap["before"] / 100, heap
    assert heap["threshold"] == heap["expected"], heap
