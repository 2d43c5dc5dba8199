"""Crash recovery with a real SIGKILL at each named failpoint (docs/protocol.md#recovery).

Each crashing child is armed the way an operator's environment would be
(``AIRLOCK_ENV=dev`` + ``AIRLOCK_EXECUTOR_FAILPOINTS``) and kills itself with SIGKILL at
the point; then a fresh process runs recovery. The file-backed fake cloud's write log,
committed with each effect, is the judge: never a second write.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from airlock.store import make_engine, verify_chain
from services.executor import FAILPOINTS
from services.executor.models import ledger

from .processes import crash_at, worker
from .support import LEASE, T0, FakeFileCloud, make_test_bundle

# What recovery must conclude after a crash at each point, per operation.
_EXPECTED = {
    # Nothing committed: no row for recovery; the bundle delivered again is written once.
    ("before_consume", "stop"): (None, 0),
    ("before_consume", "delete"): (None, 0),
    # The write never went out. A stop has no provider token: in doubt, never retried.
    ("after_executing_commit", "stop"): ("in_doubt", 0),
    # ECS DeleteInstances carries a ClientToken: re-issued with the same token.
    ("after_executing_commit", "delete"): ("succeeded", 1),
    ("after_cloud_call", "stop"): ("succeeded", 1),
    ("after_cloud_call", "delete"): ("succeeded", 1),
    ("after_outcome_commit", "stop"): ("succeeded", 1),
    ("after_outcome_commit", "delete"): ("succeeded", 1),
}


def test_sigkill_at_every_failpoint_then_recovery_never_writes_twice(
    migrated_url: str, tmp_path: Path
) -> None:
    cloud_path = tmp_path / "cloud.db"
    cloud = FakeFileCloud(cloud_path)
    cases = []
    for n, (point, op) in enumerate(_EXPECTED):
        status = "Stopped" if op == "delete" else "Running"
        b = make_test_bundle(n, tag="crash", operation=op, status=status)
        cloud.add_many([("ecs.instance", b.resource_id, status)])
        path = tmp_path / f"{n}.json"
        path.write_bytes(b.raw)
        cases.append((point, op, b, path))

    crash_at(migrated_url, cloud_path, [(point, path) for point, _, _, path in cases])

    engine = make_engine(migrated_url)
    try:
        with engine.connect() as conn:
            before = {r.approval_id: r.state for r in conn.execute(sa.select(ledger))}
        assert set(before.values()) <= {"executing", "succeeded"}

        # A fresh process, after the crashed owners' leases expired.
        rescuer = worker(migrated_url, cloud_path, T0 + 10 + LEASE, "rescuer", "--recover")
        out, err = rescuer.communicate(timeout=120)
        assert rescuer.returncode == 0, err.decode()

        with engine.connect() as conn:
            after = {r.approval_id: r for r in conn.execute(sa.select(ledger))}
        writes = cloud.writes_by_resource()
        for point, op, b, _ in cases:
            state, n_writes = _EXPECTED[(point, op)]
            row = after.get(b.approval_id)
            assert (None if row is None else row.state) == state, (point, op, row)
            assert writes.get(b.resource_id, 0) == n_writes, (point, op)
        assert all(r.state in {"succeeded", "refused", "in_doubt"} for r in after.values())
        assert verify_chain(engine).ok

        # Every bundle delivered again, as the feed does until its cursor moved past it,
        # then once more: those never consumed are written once, nothing else ever again.
        unconsumed = [b for point, _, b, _ in cases if point == "before_consume"]
        for label, replays in (("again", len(cases) - len(unconsumed)), ("thrice", len(cases))):
            again = worker(
                migrated_url,
                cloud_path,
                T0 + 20 + 2 * LEASE,
                label,
                "--recover",
                *(str(path) for *_, path in cases),
            )
            out, err = again.communicate(timeout=120)
            assert again.returncode == 0, err.decode()
            assert out.decode().count("E_REPLAY") == replays
            assert cloud.writes_by_resource() == {
                **writes,
                **{b.resource_id: 1 for b in unconsumed},
            }
            assert verify_chain(engine).ok
    finally:
        engine.dispose()


def test_every_named_failpoint_is_covered() -> None:
    assert {point for point, _ in _EXPECTED} == set(FAILPOINTS)
