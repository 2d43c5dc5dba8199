"""Entry points for the executor's multi-process tests (run in child processes).

``race``, ``resend_race`` and ``redelivery_race`` run in a ``multiprocessing`` child; ``python -m
tests.executor.workers`` is the crash/recovery child, armed through
``AIRLOCK_EXECUTOR_FAILPOINTS`` exactly as an operator's environment would be.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from airlock.store import make_engine
from services.executor import (
    Failpoints,
    ResendRefused,
    recover_expired,
    request_redelivery,
    request_resend,
)

from .support import FakeClock, binding_for, cloud_for, make_executor


def race(
    *,
    url: str,
    cloud_path: str,
    raws: list[bytes],
    barrier: Any,
    results: Any,
    worker_id: str,
    now: int,
) -> None:
    reader, writer = cloud_for(cloud_path)
    executor = make_executor(
        url,
        reader,
        FakeClock(now),
        worker_id=worker_id,
        writer=writer,
        binding=binding_for(cloud_path),
    )
    # Warm the pool so the race is between executions, not connection set-up.
    with executor.engine.connect():
        pass
    out: list[tuple[str | None, str | None, str | None]] = []
    barrier.wait()
    for raw in raws:
        outcome = executor.execute(raw)
        out.append(
            (
                outcome.approval_id,
                None if outcome.state is None else outcome.state.value,
                None if outcome.refusal_code is None else outcome.refusal_code.value,
            )
        )
    executor.engine.dispose()
    results.put((worker_id, out))


def resend_race(
    *, url: str, approval_id: str, by: str, barrier: Any, results: Any, now: int
) -> None:
    """One operator (or executor host) asking to send ``approval_id`` again."""
    engine = make_engine(url)
    with engine.connect():
        pass  # warm the pool: the race is between requests, not connection set-up
    barrier.wait()
    try:
        request_resend(engine, [approval_id], by=by, note="race", now=now)
    except ResendRefused as exc:
        results.put(("refused", str(exc)))
    else:
        results.put(("queued", by))
    finally:
        engine.dispose()


def redelivery_race(
    *,
    url: str,
    approval_id: str,
    since: int | None,
    by: str,
    barrier: Any,
    results: Any,
    now: int,
) -> None:
    """One operator (or executor host) asking to send a delivered receipt again: by its
    approval id (``since`` None) or as every receipt delivered since a time."""
    engine = make_engine(url)
    with engine.connect():
        pass  # warm the pool: the race is between requests, not connection set-up
    barrier.wait()
    try:
        queued = request_redelivery(
            engine,
            None if since is not None else [approval_id],
            since=since,
            by=by,
            note="race",
            now=now,
        )
    except ResendRefused as exc:
        results.put(("refused", by, str(exc)))
    else:
        results.put(("queued" if queued else "nothing", by, ""))
    finally:
        engine.dispose()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--cloud", required=True)
    parser.add_argument("--now", type=int, required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--recover", action="store_true")
    parser.add_argument("bundles", nargs="*")
    args = parser.parse_args(argv)
    reader, writer = cloud_for(args.cloud)
    executor = make_executor(
        args.db,
        reader,
        FakeClock(args.now),
        writer=writer,
        worker_id=args.worker,
        failpoints=Failpoints.from_env(os.environ),
        binding=binding_for(args.cloud),
    )
    if args.recover:
        for outcome in recover_expired(executor):
            print(outcome.approval_id, outcome.state)
    for path in args.bundles:
        outcome = executor.execute(Path(path).read_bytes())
        print(outcome.approval_id, outcome.state, outcome.refusal_code)
    executor.engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
