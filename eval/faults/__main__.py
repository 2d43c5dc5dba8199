"""``python -m eval.faults --seeds N [--start S] [--db sqlite|postgres] [--cloud moto]``:
run the sweep.

Exit 0 when every seed passed, 1 at the first seed that broke an invariant (its schedule
is printed), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

from ._schedule import make_schedule
from ._sweep import DEFAULT_PG_URL, run_sweep


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    del frame
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.faults", description=__doc__)
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument(
        "--db",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="the executor's ledger database (default sqlite)",
    )
    parser.add_argument(
        "--cloud",
        choices=("devcloud", "moto"),
        default="devcloud",
        help="the cloud double the executor writes to (default devcloud)",
    )
    parser.add_argument(
        "--batch", type=int, default=100, help="seeds per stack start (default 100)"
    )
    parser.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        help="PostgreSQL server (a database is created per batch)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where stacks run (default: a temporary directory)",
    )
    parser.add_argument("--keep", action="store_true", help="keep passed batches' directories")
    parser.add_argument("--verbose", action="store_true", help="print every seed's steps")
    parser.add_argument(
        "--show", action="store_true", help="print the seeds' schedules and exit without running"
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.batch < 1 or args.start < 0:
        parser.error("--seeds and --batch must be positive, --start not negative")
    # SIGTERM unwinds like Ctrl-C, so the stack's processes are stopped on the way out
    # (a sweep started in the background has SIGINT ignored).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    seeds = list(range(args.start, args.start + args.seeds))
    if args.show:
        for seed in seeds:
            print(make_schedule(seed, postgres=args.db == "postgres", cloud=args.cloud).describe())
        return 0
    with tempfile.TemporaryDirectory(prefix="airlock-faults-") as tmp:
        workdir = args.workdir or Path(tmp)
        result = run_sweep(
            seeds,
            db=args.db,
            cloud=args.cloud,
            workdir=workdir,
            batch=args.batch,
            pg_admin_url=args.pg_url,
            keep=args.keep,
            verbose=args.verbose,
        )
        print(result.summary(), flush=True)
        if result.failure is not None and args.workdir is None:
            print(
                "(the failing stack's directory is removed with the temporary directory;"
                " pass --workdir to keep it)"
            )
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
