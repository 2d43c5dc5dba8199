"""Races between real OS processes, released together by a barrier (no sleeps).

The judge is the file-backed fake cloud's write log: every effective write is a row
committed with its effect, shared by all processes.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from .processes import one_write_the_rest_replays, run_race
from .support import FakeFileCloud, make_test_bundle

WORKERS = 8


def test_eight_processes_racing_one_bundle_write_exactly_once(
    migrated_url: str, tmp_path: Path
) -> None:
    b = make_test_bundle(1, tag="race")
    cloud = FakeFileCloud(tmp_path / "cloud.db")
    cloud.add_many([("ecs.instance", b.resource_id, "Running")])
    results = run_race(migrated_url, tmp_path / "cloud.db", [[b.raw]] * WORKERS)
    assert one_write_the_rest_replays(results), results
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
    results = run_race(migrated_url, tmp_path / "cloud.db", per_worker)
    by_approval: dict[str, Counter[tuple[str | None, str | None]]] = {}
    for _, out in results:
        for approval_id, state, code in out:
            by_approval.setdefault(approval_id, Counter())[(state, code)] += 1
    assert len(by_approval) == 500
    for counts in by_approval.values():
        assert counts == {("succeeded", None): 1, (None, "E_REPLAY"): 1}
    assert cloud.writes_by_resource() == {b.resource_id: 1 for b in bundles}
