"""Integration: the executor with the real Alibaba adapter against devcloud.

devcloud's write log (every effect it applied, recorded with the effect) is the judge of
exactly-once here — not a test double of ours.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.executor import State

from .support import LEASE, T0, FakeClock, make_executor, make_test_bundle
from .test_crash import _child
from .workers import race

_CTX = multiprocessing.get_context("fork")


@pytest.fixture(scope="module")
def devcloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.support.devcloud import running_devcloud

    with running_devcloud(tmp_path_factory.mktemp("devcloud"), transition_seconds=0.2) as dc:
        yield dc


def _writes(dc: Any, resource_id: str) -> int:
    return len(dc.admin.writes(resource_id=resource_id))


def test_eight_processes_race_one_bundle_through_the_real_adapter(
    devcloud: Any, migrated_url: str, db_url: str
) -> None:
    b = make_test_bundle(1, tag=f"dcrace{'p' if 'postgres' in db_url else 's'}")
    devcloud.admin.create_instance(b.resource_id, status="Running")
    barrier = _CTX.Barrier(8)
    results = _CTX.Queue()
    procs = [
        _CTX.Process(
            target=race,
            kwargs={
                "url": migrated_url,
                "cloud_path": f"devcloud:{devcloud.endpoint}",
                "raws": [b.raw],
                "barrier": barrier,
                "results": results,
                "worker_id": f"w{i}",
                "now": T0 + 10,
            },
        )
        for i in range(8)
    ]
    for p in procs:
        p.start()
    outcomes = [o for _ in procs for o in results.get(timeout=120)[1]]
    for p in procs:
        p.join(timeout=60)
    states = sorted((state or "-", code or "-") for _, state, code in outcomes)
    assert states == [("-", "E_REPLAY")] * 7 + [("succeeded", "-")]
    assert _writes(devcloud, b.resource_id) == 1


@pytest.mark.parametrize(
    "case",
    [
        ("after_cloud_call", "stop", "succeeded"),
        ("after_executing_commit", "delete", "succeeded"),
    ],
)
def test_sigkill_then_recovery_against_devcloud_never_writes_twice(
    devcloud: Any, migrated_url: str, tmp_path: Path, case: tuple[str, str, str]
) -> None:
    point, operation, expected = case
    import sqlalchemy as sa

    from airlock.store import make_engine, verify_chain
    from services.executor.models import ledger

    status = "Stopped" if operation == "delete" else "Running"
    tag = f"dc{point[6:9]}{operation[:2]}{abs(hash(migrated_url)) % 10**6}"
    b = make_test_bundle(2, tag=tag, operation=operation, status=status)
    devcloud.admin.create_instance(b.resource_id, status=status)
    path = tmp_path / "bundle.json"
    path.write_bytes(b.raw)
    cloud = f"devcloud:{devcloud.endpoint}"
    crasher = _child(
        migrated_url,
        cloud,
        T0 + 10,
        "crasher",
        str(path),
        AIRLOCK_ENV="dev",
        AIRLOCK_EXECUTOR_FAILPOINTS=point,
    )
    _, err = crasher.communicate(timeout=120)
    assert crasher.returncode == -signal.SIGKILL, err.decode()
    rescuer = _child(migrated_url, cloud, T0 + 10 + LEASE, "rescuer", "--recover", str(path))
    out, err = rescuer.communicate(timeout=120)
    assert rescuer.returncode == 0, err.decode()
    assert "E_REPLAY" in out.decode()
    engine = make_engine(migrated_url)
    try:
        with engine.connect() as conn:
            state = conn.execute(
                sa.select(ledger.c.state).where(ledger.c.approval_id == b.approval_id)
            ).scalar_one()
        assert state == expected
        assert _writes(devcloud, b.resource_id) == (0 if expected == "in_doubt" else 1)
        assert verify_chain(engine).ok
    finally:
        engine.dispose()


def test_lost_response_is_probed_and_verified_against_devcloud(
    devcloud: Any, migrated_url: str, db_url: str
) -> None:
    b = make_test_bundle(3, tag=f"dcdrop{'p' if 'postgres' in db_url else 's'}")
    devcloud.admin.create_instance(b.resource_id, status="Running")
    devcloud.admin.set_faults(drop_next_writes=1, drop_delay_ms=3_000)
    executor = make_executor(
        migrated_url, devcloud.reader(), FakeClock(), writer=devcloud.writer(read_timeout_ms=500)
    )
    try:
        outcome = executor.execute(b.raw)
    finally:
        devcloud.admin.reset_faults()
        executor.engine.dispose()
    assert outcome.state is State.SUCCEEDED and outcome.verified, outcome
    assert _writes(devcloud, b.resource_id) == 1


def test_protect_tag_added_at_devcloud_is_refused_with_zero_writes(
    devcloud: Any, migrated_url: str, db_url: str
) -> None:
    b = make_test_bundle(4, tag=f"dcprot{'p' if 'postgres' in db_url else 's'}")
    devcloud.admin.create_instance(b.resource_id, status="Running")
    devcloud.admin.set_instance(b.resource_id, add_tags=[("airlock:protect", "yes")])
    executor = make_executor(migrated_url, devcloud.reader(), FakeClock(), writer=devcloud.writer())
    try:
        outcome = executor.execute(b.raw)
    finally:
        executor.engine.dispose()
    assert outcome.state is State.REFUSED and outcome.refusal_code == "E_PRECONDITION"
    assert _writes(devcloud, b.resource_id) == 0
