"""Integration: the executor with the real AWS adapter against moto's server.

moto's own record of the requests it received is the judge of exactly-once here, and
moto's IAM enforcement is on: the executor writes with the writer's key, and the agent's
read key cannot write at all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airlock.protocol import RefusalCode
from airlock.store import make_engine
from devstack.moto import MotoHandle, running_moto
from services.executor import Executor, State, migrate

from .processes import crash_at, one_write_the_rest_replays, run_race, worker
from .support import (
    AWS_BINDING,
    AWS_REGION,
    LEASE,
    T0,
    Bundle,
    FakeClock,
    make_aws_bundle,
    make_executor,
)

REGION = AWS_REGION


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoHandle]:
    with running_moto(tmp_path_factory.mktemp("moto")) as handle:
        handle.enforce_auth()
        yield handle


@pytest.fixture
def executor(moto: MotoHandle, tmp_path: Path) -> Iterator[Executor]:
    url = f"sqlite:///{tmp_path / 'executor.db'}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    # The executor re-reads and writes as the writer, as the CLI wires it (_cloud).
    ex = make_executor(
        url, moto.reader(key="writer"), FakeClock(), writer=moto.writer(), binding=AWS_BINDING
    )
    yield ex
    ex.engine.dispose()


def _later(seconds: int = 120) -> str:
    """An observation time after now, in a later minute than any launch so far."""
    return datetime.fromtimestamp(time.time() + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_an_approved_ec2_stop_is_written_exactly_once(moto: MotoHandle, executor: Executor) -> None:
    (iid,) = moto.seed_ec2(REGION, 1)
    bundle = make_aws_bundle(iid)
    moto.reset_record()
    first = executor.execute(bundle.raw)
    again = executor.execute(bundle.raw)
    assert first.state is State.SUCCEEDED, first.detail
    assert again.refusal_code is RefusalCode.E_REPLAY
    writes = moto.writes()
    assert [(w.action, w.ids, w.params["Hibernate"]) for w in writes] == [
        ("StopInstances", (iid,), "false")
    ]
    assert writes[0].access_key_id == moto.keys["writer"].access_key_id


def test_an_approved_terminate_after_airlocks_stop_is_written_exactly_once(
    moto: MotoHandle, executor: Executor
) -> None:
    (iid,) = moto.seed_ec2(REGION, 1)
    moto.client("ec2", REGION).stop_instances(InstanceIds=[iid])
    bundle = make_aws_bundle(iid, operation="delete", status="Stopped", observed_at=_later())
    moto.reset_record()
    outcome = executor.execute(bundle.raw)
    assert outcome.state is State.SUCCEEDED, outcome.detail
    assert executor.execute(bundle.raw).refusal_code is RefusalCode.E_REPLAY
    assert [(w.action, w.ids) for w in moto.writes()] == [("TerminateInstances", (iid,))]
    assert moto.reader().get_state(REGION, "ec2.instance", iid) is None


def test_an_approved_rds_stop_is_written_exactly_once(moto: MotoHandle, executor: Executor) -> None:
    name = moto.seed_rds(REGION, "orders-exec-1")
    bundle = make_aws_bundle(name)
    moto.reset_record()
    outcome = executor.execute(bundle.raw)
    assert outcome.state is State.SUCCEEDED, outcome.detail
    assert executor.execute(bundle.raw).refusal_code is RefusalCode.E_REPLAY
    assert [(w.action, w.ids) for w in moto.writes()] == [("StopDBInstance", (name,))]


def test_a_protect_tag_added_after_approval_is_refused_with_zero_writes(
    moto: MotoHandle, executor: Executor
) -> None:
    (iid,) = moto.seed_ec2(REGION, 1)
    bundle = make_aws_bundle(iid)
    # A person protects the instance after the approval was signed.
    moto.client("ec2", REGION).create_tags(
        Resources=[iid], Tags=[{"Key": "Airlock:Protect", "Value": "yes"}]
    )
    moto.reset_record()
    outcome = executor.execute(bundle.raw)
    assert outcome.refusal_code is RefusalCode.E_PRECONDITION
    assert "Airlock:Protect" in outcome.detail
    assert moto.writes() == []


def test_a_production_tag_added_after_approval_is_refused_with_zero_writes(
    moto: MotoHandle, executor: Executor
) -> None:
    name = moto.seed_rds(REGION, "orders-exec-prod")
    bundle = make_aws_bundle(name)
    moto.client("rds", REGION).add_tags_to_resource(
        ResourceName=f"arn:aws:rds:{REGION}:123456789012:db:{name}",
        Tags=[{"Key": "Environment", "Value": "Production"}],
    )
    moto.reset_record()
    outcome = executor.execute(bundle.raw)
    assert outcome.refusal_code is RefusalCode.E_PRECONDITION
    assert "production" in outcome.detail
    assert moto.writes() == []


def test_an_instance_a_person_started_after_airlocks_stop_is_not_terminated(
    moto: MotoHandle, executor: Executor
) -> None:
    (iid,) = moto.seed_ec2(REGION, 1)
    stop = make_aws_bundle(iid, approval_id="apv_personstartstop1")
    assert executor.execute(stop.raw).state is State.SUCCEEDED
    # The delete approval rests on seeing it stopped now; then a person starts it (EC2
    # resets LaunchTime) and stops it again, so it is Stopped as the approval requires.
    delete = make_aws_bundle(iid, operation="delete", status="Stopped", observed_at=_now())
    admin = moto.client("ec2", REGION)
    admin.start_instances(InstanceIds=[iid])
    admin.stop_instances(InstanceIds=[iid])
    moto.reset_record()
    outcome = executor.execute(delete.raw)
    assert outcome.refusal_code is RefusalCode.E_PRECONDITION
    assert "started at" in outcome.detail
    assert moto.writes(key="writer") == []
    state = moto.reader().get_state(REGION, "ec2.instance", iid)
    assert state is not None and state.status == "Stopped"


def test_an_executor_given_the_read_key_cannot_write(moto: MotoHandle, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'reader-executor.db'}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    ex = make_executor(
        url,
        moto.reader(),
        FakeClock(),
        writer=moto.writer(key="reader"),
        binding=AWS_BINDING,
    )
    (iid,) = moto.seed_ec2(REGION, 1)
    outcome = ex.execute(make_aws_bundle(iid).raw)
    ex.engine.dispose()
    assert outcome.state is State.FAILED
    assert "AccessDenied" in outcome.detail
    state = moto.reader().get_state(REGION, "ec2.instance", iid)
    assert state is not None and state.status == "Running"


def test_an_alibaba_executor_refuses_an_aws_approval(moto: MotoHandle, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'alibaba-executor.db'}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    ex = make_executor(url, moto.reader(key="writer"), FakeClock(), writer=moto.writer())
    (iid,) = moto.seed_ec2(REGION, 1)
    moto.reset_record()
    outcome = ex.execute(make_aws_bundle(iid).raw)
    ex.engine.dispose()
    assert outcome.refusal_code in (RefusalCode.E_AUDIENCE, RefusalCode.E_ACCOUNT)
    assert moto.writes() == []


def _spec(moto: MotoHandle) -> str:
    key = moto.keys["writer"]
    return f"moto:{moto.url},{key.access_key_id},{key.secret_access_key}"


def test_eight_processes_race_one_bundle_through_the_aws_adapter(
    moto: MotoHandle, migrated_url: str
) -> None:
    # On both ledgers, as the devcloud race.
    (iid,) = moto.seed_ec2(REGION, 1)
    b = make_aws_bundle(iid, approval_id=f"apv_race{iid.replace('-', '')}")
    moto.reset_record()
    results = run_race(migrated_url, _spec(moto), [[b.raw]] * 8)
    assert one_write_the_rest_replays(results), results
    assert [(w.action, w.ids) for w in moto.writes()] == [("StopInstances", (iid,))]


#: What recovery must conclude after a SIGKILL at each point, per write (as
#: test_crash.py's table for devcloud): (ledger state, writes by moto's record).
_CRASHES = {
    # Nothing committed: no row; the bundle delivered again is written once.
    ("before_consume", "stop"): (None, 0),
    ("before_consume", "rds"): (None, 0),
    ("before_consume", "delete"): (None, 0),
    # The write never went out. A stop has no provider token: in doubt, never retried;
    # a terminate that still verifies is issued again (terminating twice is a no-op).
    ("after_executing_commit", "stop"): ("in_doubt", 0),
    ("after_executing_commit", "rds"): ("in_doubt", 0),
    ("after_executing_commit", "delete"): ("succeeded", 1),
    ("after_cloud_call", "stop"): ("succeeded", 1),
    ("after_cloud_call", "rds"): ("succeeded", 1),
    ("after_cloud_call", "delete"): ("succeeded", 1),
    ("after_outcome_commit", "stop"): ("succeeded", 1),
    ("after_outcome_commit", "rds"): ("succeeded", 1),
    ("after_outcome_commit", "delete"): ("succeeded", 1),
}


def _crash_case(moto: MotoHandle, n: int, write: str) -> Bundle:
    if write == "rds":
        name = moto.seed_rds(REGION, f"db-crash-{n}")
        return make_aws_bundle(name, approval_id=f"apv_crash{n:02d}rds")
    (iid,) = moto.seed_ec2(REGION, 1)
    if write == "stop":
        return make_aws_bundle(iid)
    moto.client("ec2", REGION).stop_instances(InstanceIds=[iid])
    return make_aws_bundle(iid, operation="delete", status="Stopped", observed_at=_later())


def test_sigkill_at_every_failpoint_then_recovery_against_moto_never_writes_twice(
    moto: MotoHandle, sqlite_url: str, tmp_path: Path
) -> None:
    import sqlalchemy as sa

    from airlock.store import verify_chain
    from services.executor import FAILPOINTS
    from services.executor.models import ledger

    assert {point for point, _ in _CRASHES} == set(FAILPOINTS)
    engine = make_engine(sqlite_url)
    migrate(engine)
    cases = []
    for n, (point, write) in enumerate(_CRASHES):
        b = _crash_case(moto, n, write)
        path = tmp_path / f"{n}.json"
        path.write_bytes(b.raw)
        cases.append((point, write, b, path))
    moto.reset_record()
    crash_at(sqlite_url, _spec(moto), [(point, path) for point, _, _, path in cases])

    def writes() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for w in moto.writes():
            for rid in w.ids:
                out.setdefault(rid, []).append(w.action)
        return out

    try:
        # A fresh process, after the crashed owners' leases expired.
        rescuer = worker(sqlite_url, _spec(moto), T0 + 10 + LEASE, "rescuer", "--recover")
        _, err = rescuer.communicate(timeout=240)
        assert rescuer.returncode == 0, err.decode()
        with engine.connect() as conn:
            after = {r.approval_id: r.state for r in conn.execute(sa.select(ledger))}
        seen = writes()
        for point, write, b, _ in cases:
            state, count = _CRASHES[(point, write)]
            assert after.get(b.approval_id) == state, (point, write)
            assert len(seen.get(b.resource_id, [])) == count, (point, write, seen)
        assert verify_chain(engine).ok

        # Every bundle delivered again, as the feed does until its cursor moved past it:
        # those never consumed are written once, nothing else ever again.
        again = worker(
            sqlite_url,
            _spec(moto),
            T0 + 20 + 2 * LEASE,
            "again",
            "--recover",
            *(str(path) for *_, path in cases),
        )
        out, err = again.communicate(timeout=240)
        assert again.returncode == 0, err.decode()
        unconsumed = {b.resource_id for point, _, b, _ in cases if point == "before_consume"}
        assert out.decode().count("E_REPLAY") == len(cases) - len(unconsumed)
        final = writes()
        for _, write, b, _ in cases:
            expected = {"stop": "StopInstances", "rds": "StopDBInstance"}.get(
                write, "TerminateInstances"
            )
            assert set(final.get(b.resource_id, [])) <= {expected}
            assert len(final.get(b.resource_id, [])) == (
                1 if b.resource_id in unconsumed else len(seen.get(b.resource_id, []))
            )
        assert verify_chain(engine).ok
    finally:
        engine.dispose()
