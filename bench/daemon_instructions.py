"""Instructions per approval of the ``airlock executor`` daemon's process, as it runs in
``bench_e2e``: CPU that no neighbour moves.

``python -m bench.daemon_instructions [--small 10] [--large 50] [--db postgres|sqlite]
[--pg URL] [--parallel P]`` starts devcloud and the checkpoint (devstack.stack, not
counted) and the executor daemon on the checkpoint's feed under valgrind's cachegrind,
approves ``--small`` proposals one at a time (each waits until its outcome is delivered,
so each is a feed page, an execution and a receipt POST of its own), stops the daemon
and reads its count; then the same with ``--large`` approvals on a new stack and ledger.
Their difference per approval is printed: start-up, imports, recovery at start and the
shutdown (the same in both) cancel out. What is left is everything the daemon's process
does for an approval: the long-poll, the execution with its PostgreSQL (or SQLite)
commits, the live re-read and the write through the SDK, the receipt's delivery, logging
and the hand-offs between its threads.

Work paced by the clock is not per approval, and under valgrind an approval takes
seconds: recovery passes and the outbox's sweeps (``AIRLOCK_EXECUTOR_RECOVER_EVERY``,
30 s by default) would add a few million instructions per approval, more on a loaded
machine. They are set an hour apart here; what remains (the courier's tick, the
heartbeat) is small. Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from bench.bench_e2e import DEFAULT_PG_URL, _Bench, _pg_database
from devstack.stack import running_stack

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")
_START_S = 600.0  # the daemon's start under valgrind: its imports, 50 times slower
_WAIT_S = 120.0
_WARM = 5  # approvals before the counted ones in both runs: the SDK's import, first plans


def _until(what: str, probe: Callable[[], Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)  # polls a local ledger; not the process counted


@contextmanager
def _ledger(db: str, pg_url: str) -> Iterator[str | None]:
    if db == "postgres":
        with _pg_database(pg_url) as url:
            yield url
    else:
        yield None


def _count(approvals: int, *, db: str, pg_url: str, parallel: int | None) -> int:
    """The daemon's instructions from its start to its stop, with ``_WARM`` +
    ``approvals`` approvals executed one at a time on a new stack."""
    env = {"AIRLOCK_EXECUTOR_RECOVER_EVERY": "3600"}
    if parallel is not None:
        env["AIRLOCK_EXECUTOR_PARALLEL"] = str(parallel)
    with (
        tempfile.TemporaryDirectory() as tmp,
        _ledger(db, pg_url) as ledger_url,
        running_stack(
            Path(tmp), webapp=False, ledger_url=ledger_url, start_executor=False, executor_env=env
        ) as stack,
    ):
        out = Path(tmp) / "valgrind.log"
        executor = stack.executor
        executor.cmd = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            f"--log-file={out}",
            *executor.cmd,
        ]
        executor.spawn()
        executor.wait_ready(timeout=_START_S)
        bench = _Bench(stack)
        try:
            for _ in range(_WARM + approvals):
                # A client each: uvicorn closes a connection idle for 5 s, and the wait
                # for a delivery under valgrind can be longer.
                person = bench.person()
                approval_id = person.approve(bench.propose())[2]
                person.close()
                _until(
                    f"the delivery of {approval_id}", partial(bench.delivered, approval_id), _WAIT_S
                )
        finally:
            bench.close()
        code = executor.stop(timeout=_WAIT_S)
        if code != 0:
            raise RuntimeError(f"the executor exited with {code}:\n{executor.log()[-2000:]}")
        found = _REFS.search(out.read_text())
        if found is None:
            raise RuntimeError(f"no instruction count from valgrind:\n{out.read_text()[-2000:]}")
        return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--large", type=int, default=50)
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--pg", default=DEFAULT_PG_URL, help="PostgreSQL server (admin URL)")
    parser.add_argument("--parallel", type=int, help="AIRLOCK_EXECUTOR_PARALLEL (default 4)")
    args = parser.parse_args(argv)
    counts = [
        _count(n, db=args.db, pg_url=args.pg, parallel=args.parallel)
        for n in (args.small, args.large)
    ]
    per = (counts[1] - counts[0]) / (args.large - args.small)
    print(f"-- the executor daemon's process per approval, one at a time, ledger on {args.db}")
    print(f"   instructions per approval {per / 1e6:10.2f} M")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
