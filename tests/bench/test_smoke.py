"""Every benchmark still runs end to end (tiny sizes; the figures are not checked).

Benchmarks are not tests of speed (they report ratios, see bench/RESULTS.md), but a
change elsewhere must not leave one unable to start — as happened when the checkpoint
began to require the executor's receipt key set. Exit code 1 is a benchmark reporting
a goal it did not meet; anything else non-zero, or a traceback, is a broken benchmark.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]

_RUNS = {
    "bench_protocol": (["--rounds", "1", "--seconds", "0.02"], "ratio verify_bundle"),
    "bench_executor": (
        ["--no-pg", "--rounds", "1", "--batch", "5", "--workers", "2"],
        "workers against their own floor",
    ),
    "bench_checkpoint": (["--rounds", "1", "--batch", "3"], "ratio HTTP approvals"),
    "bench_agent": (["--instances", "20", "--workers", "2"], "scan / bare"),
    "bench_agent_aws": (["--instances", "12", "--metrics", "4", "--workers", "1"], "scan / bare"),
    "bench_gate": (["--rounds", "1", "--calls", "3"], "ratio gate's own overhead"),
    "bench_e2e": (["--db", "sqlite", "--n", "3", "--burst", "3"], "ratio: approval->write"),
    "bench_refusal_flood": (["--rounds", "1", "--batch", "3"], "ratio flooded / alone"),
    "bench_notify": (["--rounds", "1", "--batch", "3"], "ratio with channels / none"),
}


@pytest.mark.parametrize("name", sorted(_RUNS))
def test_the_benchmark_runs(name: str, tmp_path: Path) -> None:
    args, expected = _RUNS[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *args],
        cwd=_ROOT,
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert expected in done.stdout, done.stdout[-3000:]


def test_every_benchmark_is_smoke_tested() -> None:
    on_disk = {p.stem for p in (_ROOT / "bench").glob("bench_*.py")}
    assert on_disk == set(_RUNS)
