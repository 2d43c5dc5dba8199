"""Shared measuring harness: interleaved rounds, medians, ratios. Not a test.

Each benchmark measures Airlock's path and the raw primitive it is built on in the same
run, alternating round by round so that machine noise hits both alike, and reports the
ratio of medians; absolute figures vary by machine, the ratio much less.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Result", "interleaved", "ops_per_second"]


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
