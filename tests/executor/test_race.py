"""Races between real OS processes, released together by a barrier (no sleeps).

The judge is the file-backed fake cloud's write log: every effective write is a row
committed with its effect, shared by all processes.
"""

from __future__ import annotations

import multiprocessing
import random
from collections import Counter
from pathlib import Path
from typing import Any

from .support import T0, FakeFileCloud, make_test_bundle
from .workers import race

WORKERS = 8
# fork: the children start in milliseconds with everything imported; each one opens its
# own engine after the fork (the parent holds no open database connection).
_CTX = multiprocessing.get_context("fork")


def _run(url: str, cloud_path: Path, per_worker: list[list[bytes]]) -> list[Any]:
    barrier = _CTX.Barrier(len(per_worker))
    results = _CTX.Queue()
    procs = [
        _CTX.Process(
            target=race,
            kwargs={
                "url": url,
                "cloud_path": str(cloud_path),
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
    out = [results.get(timeout=240) for _ in procs]  # drain before join
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


def test_eight_processes_racing_one_bundle_write_exactly_once(
    migrated_url: str, tmp_path: Path
) -> None:
    b = make_test_bundle(1, tag="race")
    cloud = FakeFileCloud(tmp_path / "cloud.db")
    cloud.add_many([("ecs.instance", b.resource_id, "Running")])
    results = _run(migrated_url, tmp_path / "cloud.db", [[b.raw]] * WORKERS)
    outcomes = [o for _, out in results for o in out]
    assert Counter((state, code) for _, state, code in outcomes) == {
        ("succeeded", None): 1,
        (None, "E_REPLAY"): WORKERS - 1,
    }
    assert cloud.writes_by_resource() == {b.resource_id: 1}


def test_eight_processes_over_500_bundles_write_each_exactly_once(
    migrated_url: str, tmp_path: Path
) -> None:
    bundles = [make_test_bundle(n, tag="many") for n in range(500)]
    cloud = FakeFileCloud(tmp_path / "cloud.db")
    cloud.add_many([("ecs.instance", b.resource_id, "Running") for b in bundles])
    # Two workers race for every bundle, in the same shuffled order so they collide on
    # each one, and all eight run at once. (Every worker trying all 500 proves no more
    # and costs four times the commits; the single-bundle test above races eight.)
    per_worker = []
    for i in range(WORKERS):
        share = [b.raw for b in bundles[i // 2 :: WORKERS // 2]]
        random.Random(i // 2).shuffle(share)
        per_worker.append(share)
    results = _run(migrated_url, tmp_path / "cloud.db", per_worker)
    by_approval: dict[str, Counter[tuple[str | None, str | None]]] = {}
    for _, out in results:
        for approval_id, state, code in out:
            by_approval.setdefault(approval_id, Counter())[(state, code)] += 1
    assert len(by_approval) == 500
    for counts in by_approval.values():
        assert counts == {("succeeded", None): 1, (None, "E_REPLAY"): 1}
    assert cloud.writes_by_resource() == {b.resource_id: 1 for b in bundles}
