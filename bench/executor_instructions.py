"""Instructions per execution of the executor's whole path: CPU that no neighbour moves.

``python -m bench.executor_instructions [--small 20] [--large 120]`` runs the path of
``bench_executor`` (a fresh bundle: verify, live re-read, consume, in-memory write,
outcome and receipt) on a SQLite ledger in /dev/shm under valgrind's cachegrind, once
with ``--small`` executions and once with ``--large``, and prints the difference per
execution: start-up, imports and migrations cancel out. Valgrind counts instructions,
not time, so the figure is the same on a quiet machine and a loaded one; it hides the
CPU's newer instruction sets from OpenSSL, so the Ed25519 share reads higher than it
runs natively. Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from airlock.store import make_engine
from bench.bench_executor import _bundles, _executor
from services.executor import migrate

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _run(count: int, largest: int) -> None:
    """Execute ``count`` fresh bundles after 20 warm-up ones (``largest`` are made, so
    every run signs the same number of bundles)."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
        executor = _executor(url)
        warm, bundles = _bundles("w", 20), _bundles("p", largest)[:count]
        for raw in [*warm, *bundles]:
            outcome = executor.execute(raw)
            if outcome.state is None or outcome.state.value != "succeeded":
                raise RuntimeError(f"bench execution did not succeed: {outcome}")
        executor.engine.dispose()


def _instructions(count: int, largest: int) -> int:
    command = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "bench.executor_instructions",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=120)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        _run(args.child, args.large)
        return 0
    small = _instructions(args.small, args.large)
    large = _instructions(args.large, args.large)
    per = (large - small) / (args.large - args.small)
    print("-- executor path on a tmpfs SQLite ledger, under valgrind (cachegrind)")
    print(f"   instructions per execution        {per / 1e6:10.2f} M")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
