"""``make bench``: run each ``bench_*`` module's ``run()`` and print its rows as one table of medians.

A module's ``run()`` is async and returns rows ``(name, samples_seconds, note)``; the table shows the
median, p90 and count, so one noisy sample on these shared cores does not decide a figure.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import statistics
import sys

import tests.bench as package


def _fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def main(selected: list[str]) -> None:
    rows: list[tuple[str, list[float], str]] = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("bench_") and (not selected or info.name in selected):
            module = importlib.import_module(f"tests.bench.{info.name}")
            rows.extend(asyncio.run(module.run()))
    if not rows:
        return
    width = max(len(name) for name, _, _ in rows)
    print(f"{'benchmark':<{width}}  {'median':>10}  {'p90':>10}  {'n':>5}  note")
    for name, samples, note in rows:
        ordered = sorted(samples)
        p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
        print(
            f"{name:<{width}}  {_fmt(statistics.median(ordered)):>10}  {_fmt(p90):>10}  {len(ordered):>5}  {note}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
