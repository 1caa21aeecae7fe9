"""The diff service's line diff against GNU ``diff -u`` on the same files, in the same run.

Bodies of random prose (about 50 characters a line) with 1% of their lines changed, at 100 KB and
1 MiB. Our figure is ``compute()``: both sides split into lines, aligned, and rendered as diff_json
and diff_unified. GNU's is the whole ``diff -u`` process (start, read, diff, write), the issue's target:
ours within 3x of it at 1 MiB, and growing linearly from 100 KB to 1 MiB. Samples of the two alternate,
so a busy neighbour on these shared cores slows both alike.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from diff.domain.fields import MessageFields
from diff.domain.message import compute

ROUNDS = 21
SIZES = ((100_000, "100 KB"), (1024 * 1024, "1 MiB"), (2 * 1024 * 1024, "2 MiB"))
VOCABULARY = (
    "the a of to and in that is was he for it with as his on be at by this had not are but from or have an "
    "they which one you were her all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do first "
    "any my now such like our over man me even most made after also did many before must through back years"
)


def prose(size: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = VOCABULARY.split()
    lines: list[str] = []
    total = 0
    while total < size:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(4, 16))).capitalize() + ".\n"
        lines.append(line)
        total += len(line)
    return lines


def one_percent_changed(lines: list[str], seed: int) -> list[str]:
    rng = random.Random(seed)
    changed = list(lines)
    for index in rng.sample(range(len(lines)), max(1, len(lines) // 100)):
        changed[index] = "Edited: " + changed[index]
    return changed


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def _measure() -> list[tuple[str, list[float], str]]:
    gnu = shutil.which("diff")
    rows: list[tuple[str, list[float], str]] = []
    medians: list[float] = []
    previous = 0
    with tempfile.TemporaryDirectory() as tmp:
        for size, label in SIZES:
            before_lines = prose(size, seed=size)
            before, after = "".join(before_lines), "".join(one_percent_changed(before_lines, seed=size + 1))
            a, b = Path(tmp, f"before-{size}"), Path(tmp, f"after-{size}")
            a.write_text(before)
            b.write_text(after)
            fields_before, fields_after = MessageFields(body_text=before), MessageFields(body_text=after)
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(ROUNDS):
                started = time.perf_counter()
                compute(fields_before, fields_after).diff_json  # noqa: B018 - the bytes are part of the work
                ours.append(time.perf_counter() - started)
                if gnu:
                    started = time.perf_counter()
                    subprocess.run([gnu, "-u", str(a), str(b)], stdout=subprocess.DEVNULL, check=False)
                    theirs.append(time.perf_counter() - started)
            note = f"{len(before_lines)} lines, 1% changed"
            if theirs:
                note += f"; {_median_ms(ours) / _median_ms(theirs):.2f}x GNU diff -u"
            if medians:
                growth = _median_ms(ours) / medians[-1]
                note += f"; {growth:.1f}x the previous size's time for {size / previous:.1f}x the input"
            medians.append(_median_ms(ours))
            previous = size
            rows.append((f"diff: compute, {label} body", ours, note))
            if theirs:
                rows.append((f"diff: GNU diff -u process, {label}", theirs, "same files, same run"))
    return rows


async def run() -> list[tuple[str, list[float], str]]:
    return await asyncio.to_thread(_measure)
