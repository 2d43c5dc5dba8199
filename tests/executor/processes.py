"""Starting the executor's multi-process tests' children (their entry points are in
:mod:`tests.executor.workers`), whatever the cloud: the file-backed fake, devcloud or moto
(a ``cloud`` as :func:`tests.executor.support.cloud_for` reads it)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .support import T0
from .workers import race

__all__ = ["crash_at", "one_write_the_rest_replays", "run_race", "worker"]

_ROOT = Path(__file__).resolve().parents[2]
# fork: the children start in milliseconds with everything imported; each one opens its
# own engine after the fork (the parent holds no open database connection).
_CTX = multiprocessing.get_context("fork")


def run_race(
    url: str, cloud: Path | str, per_worker: list[list[bytes]], *, timeout: float = 240
) -> list[Any]:
    """One process a list of bundles, released together by a barrier to execute theirs on
    ledger ``url`` against ``cloud``; each process's ``(worker_id, outcomes)``, where an
    outcome is ``(approval_id, state, refusal code)``."""
    barrier = _CTX.Barrier(len(per_worker))
    results = _CTX.Queue()
    procs = [
        _CTX.Process(
            target=race,
            kwargs={
                "url": url,
                "cloud_path": str(cloud),
                "raws": raws,
                "barrier": barrier,
                "results": results,
                "worker_id": f"w{i}",
                "now": T0 + 10,
            },
        )
        for i, raws in enumerate(per_worker)
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=timeout) for _ in procs]  # drain before join
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


def one_write_the_rest_replays(results: list[Any]) -> bool:
    """Whether the processes of :func:`run_race` over one bundle saw exactly one success
    and a replay refusal each other."""
    outcomes = Counter((state, code) for _, out in results for _, state, code in out)
    return outcomes == {("succeeded", None): 1, (None, "E_REPLAY"): len(results) - 1}


def worker(
    db: str, cloud: Path | str, now: int, name: str, *args: str, **env: str
) -> subprocess.Popen[bytes]:
    """``python -m tests.executor.workers`` on ledger ``db`` and ``cloud`` at ``now``
    (``args`` and ``env`` added: bundle files, ``--recover``, failpoints), not awaited."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.executor.workers",
            "--db",
            db,
            "--cloud",
            str(cloud),
            "--now",
            str(now),
            "--worker",
            name,
            *args,
        ],
        cwd=_ROOT,
        env={**base, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def crash_at(
    db: str, cloud: Path | str, cases: Sequence[tuple[str, Path]], *, timeout: float = 240
) -> None:
    """One :func:`worker` a ``(failpoint, bundle file)`` of ``cases``, all at once, each
    armed as an operator's environment would be (``AIRLOCK_ENV=dev`` and
    ``AIRLOCK_EXECUTOR_FAILPOINTS``); AssertionError unless each died by SIGKILL."""
    crashing = [
        worker(
            db,
            cloud,
            T0 + 10,
            f"crasher-{n}",
            str(path),
            AIRLOCK_ENV="dev",
            AIRLOCK_EXECUTOR_FAILPOINTS=point,
        )
        for n, (point, path) in enumerate(cases)
    ]
    for proc in crashing:
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == -signal.SIGKILL, err.decode()
