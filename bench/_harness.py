"""Shared measuring harness: interleaved rounds, medians, ratios. Not a test.

Each benchmark measures Airlock's path and the raw primitive it is built on in the same
run, alternating round by round so that machine noise hits both alike, and reports the
ratio of medians; absolute figures vary by machine, the ratio much less.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Result", "instructions_per_item", "interleaved", "ops_per_second"]


@dataclass(frozen=True)
class Result:
    name: str
    ops_per_second: float


def ops_per_second(fn: Callable[[], object], *, seconds: float = 0.25) -> float:
    """Run ``fn`` repeatedly for about ``seconds`` and return calls per second."""
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(50):
            fn()
        calls += 50
        now = time.perf_counter()
        if now >= deadline:
            return calls / (now - start)


def interleaved(
    subjects: dict[str, Callable[[], object]], *, rounds: int = 7, seconds: float = 0.25
) -> dict[str, float]:
    """Median calls/second per subject over ``rounds`` alternating rounds."""
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    for fn in subjects.values():  # warm up caches and lazy imports
        ops_per_second(fn, seconds=0.05)
    for _ in range(rounds):
        for name, fn in subjects.items():
            samples[name].append(ops_per_second(fn, seconds=seconds))
    return {name: statistics.median(values) for name, values in samples.items()}


_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _instructions(module: str, count: int, largest: int) -> int:
    command = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        "-m",
        module,
        "--child",
        str(count),
        "--large",
        str(largest),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    found = _REFS.search(done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def instructions_per_item(module: str, small: int, large: int) -> float:
    """Instructions per item of ``python -m module --child N --large L`` under valgrind
    (cachegrind, no cache simulation): two runs of ``small`` and ``large`` items, so the
    start-up both share cancels out. The load does not move the count."""
    fewer = _instructions(module, small, large)
    more = _instructions(module, large, large)
    return (more - fewer) / (large - small)
