"""Shared measuring harness: interleaved rounds, medians, ratios. Not a test.

Each benchmark measures Airlock's path and the raw primitive it is built on in the same
run, alternating round by round so that machine noise hits both alike, and reports the
ratio of medians; absolute figures vary by machine, the ratio much less.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "Result",
    "instructions_main",
    "instructions_per_item",
    "interleaved",
    "ops_per_second",
]


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


def _instructions(module: str, count: int, largest: int, extra: Sequence[str]) -> int:
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
        *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    found = _REFS.search(done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def instructions_per_item(module: str, small: int, large: int, extra: Sequence[str] = ()) -> float:
    """Instructions per item of ``python -m module --child N --large L [extra…]`` under
    valgrind (cachegrind, no cache simulation; a process it starts is not counted): two
    runs of ``small`` and ``large`` items, so the start-up both share cancels out. The
    load does not move the count."""
    fewer = _instructions(module, small, large, extra)
    more = _instructions(module, large, large, extra)
    return (more - fewer) / (large - small)


def instructions_main(
    argv: list[str] | None,
    *,
    module: str,
    doc: str | None,
    child: Callable[[int, int], None],
    what: str,
    per: str,
) -> int:
    """The command line of an instruction-count benchmark: ``--small``/``--large`` items,
    counted by :func:`instructions_per_item`; ``--child N`` (the counted run) calls
    ``child(N, large)``. Prints ``what`` and the count per ``per``."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=120)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.large)
        return 0
    count = instructions_per_item(module, args.small, args.large)
    print(f"-- {what}")
    print(f"   instructions per {per:<17} {count / 1e6:10.2f} M")
    return 0
