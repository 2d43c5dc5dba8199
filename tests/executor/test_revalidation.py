"""An approval must still allow the write at the moment the write is committed to.

From a security review: before these fixes, (1) recovery re-issued an ECS delete whose
first call never left — making it the one and only write — however late, after the
approval was revoked, and after the instance was protected; (2) expiry and revocation
were checked before the live re-read and never again, so a slow re-read let the write
land after either; (3) recovery continued a consumed row signed by a key revoked since;
(4) on PostgreSQL, an owner finishing while a rescuer took its row over could deadlock
(the two took the audit chain lock and the row lock in opposite orders).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airlock.protocol import KeySet, KeyStatus, RefusalCode, canonical_bytes, verify_bundle
from airlock.store import make_engine, verify_chain
from services.executor import Executor, Failpoints, State, TrustedKeysFile
from services.executor import ledger as ledger_ops
from services.executor.consume import Consume, ledger_row
from services.executor.errors import SimulatedCrash
from services.executor.models import LedgerRow, Work, ledger, refusals, revocations
from services.executor.recover import recover_expired

from .conftest import Env
from .support import (
    BINDING,
    LEASE,
    T0,
    TTL,
    FakeClock,
    InMemoryCloud,
    approval_signer,
    keyset,
    leave_claimed,
    make_test_bundle,
    receipt_signer,
)


def _crash_at(point: str) -> Failpoints:
    def _raise(p: str) -> None:
        raise SimulatedCrash(p)

    return Failpoints(frozenset({point}), action=_raise)


def _row(env: Env, approval_id: str) -> LedgerRow:
    with env.engine.connect() as conn:
        found = conn.execute(sa.select(ledger).where(ledger.c.approval_id == approval_id))
        return LedgerRow.from_mapping(found.mappings().one())


def _refused_unconsumed(env: Env, approval_id: str) -> list[str]:
    """The codes of ``approval_id``'s refusals; asserts it has no ledger row."""
    with env.engine.connect() as conn:
        assert (
            conn.execute(sa.select(ledger).where(ledger.c.approval_id == approval_id)).all() == []
        )
        found = conn.execute(
            sa.select(refusals.c.code).where(refusals.c.approval_id == approval_id)
        )
        return [str(code) for code in found.scalars()]


def _record_revocation(env: Env, approval_id: str) -> None:
    with env.engine.begin() as conn:
        conn.execute(
            sa.insert(revocations).values(
                approval_id=approval_id, feed="test", feed_seq=1, received_at=T0
            )
        )


def _delete_stuck_in_executing(env: Env, n: int) -> Any:
    """An ECS delete whose worker died after committing ``executing``, before the call."""
    b = make_test_bundle(n, tag="reiss", operation="delete", status="Stopped")
    env.cloud.add("ecs.instance", b.resource_id, "Stopped")
    crashy = env.another_worker("crashy", failpoints=_crash_at("after_executing_commit"))
    with pytest.raises(SimulatedCrash):
        crashy.execute(b.raw)
    assert env.cloud.calls == []  # the call never left
    return b


@pytest.mark.parametrize("change", ["revoked", "expired", "protected", "none"])
def test_recovery_reissues_a_delete_only_while_the_approval_still_allows_it(
    env: Env, change: str
) -> None:
    b = _delete_stuck_in_executing(env, 1)
    revoked: set[str] = set()
    env.clock.advance(LEASE)
    if change == "revoked":
        revoked.add(b.approval_id)
    elif change == "expired":
        env.clock.now = T0 + TTL + LEASE
    elif change == "protected":
        env.cloud.tag("ecs.instance", b.resource_id, "airlock:protect", "yes")

    [outcome] = recover_expired(env.executor, revoked=revoked)

    if change == "none":
        assert outcome.state is State.SUCCEEDED
        assert "re-issued" in outcome.detail
        assert env.cloud.writes_for(b.resource_id) == 1
    else:
        assert outcome.state is State.IN_DOUBT, outcome
        assert "not re-issued" in outcome.detail, outcome.detail
        assert env.cloud.writes_for(b.resource_id) == 0
    assert verify_chain(env.engine).ok


class _SlowReader:
    """Reads live state through ``cloud`` while ``during`` runs (the read takes time)."""

    def __init__(self, cloud: InMemoryCloud, during: Callable[[], None]) -> None:
        self._cloud = cloud
        self._during = during

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cloud, name)

    def get_state(self, region: str, resource_type: Any, resource_id: str) -> Any:
        self._during()
        return self._cloud.get_state(region, resource_type, resource_id)


def _executor_reading_through(env: Env, reader: Any) -> Executor:
    other = Executor(
        engine=make_engine(env.url),
        keys=env.executor.trusted_keys(),
        binding=BINDING,
        reader=reader,
        writer=env.cloud,
        signer=receipt_signer(),
        clock=env.clock,
        worker_id="slow-reader",
        lease_seconds=LEASE,
    )
    env.others.append(other)
    return other


def test_an_approval_that_expires_during_the_live_re_read_is_not_written(env: Env) -> None:
    b = make_test_bundle(2, tag="reread")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    env.clock.now = T0 + TTL - 5  # valid when verified and consumed
    slow = _executor_reading_through(env, _SlowReader(env.cloud, lambda: env.clock.advance(9)))

    outcome = slow.execute(b.raw)

    # Refused before the consume: nothing consumed, the refusal recorded (and reported).
    assert (outcome.state, outcome.refusal_code) == (None, RefusalCode.E_EXPIRED)
    assert env.cloud.writes_for(b.resource_id) == 0
    assert _refused_unconsumed(env, b.approval_id) == ["E_EXPIRED"]


@pytest.mark.parametrize("where", ["source", "ledger"])
def test_an_approval_revoked_during_the_live_re_read_is_not_written(env: Env, where: str) -> None:
    """``source``: the revoked set the caller passed learns it; ``ledger``: only the
    ledger's revocation table does — caught by the executing UPDATE itself."""
    b = make_test_bundle(3, tag=f"rev{where}")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    revoked: set[str] = set()

    def revoke() -> None:
        if where == "source":
            revoked.add(b.approval_id)
        else:
            _record_revocation(env, b.approval_id)

    slow = _executor_reading_through(env, _SlowReader(env.cloud, revoke))
    outcome = slow.execute(b.raw, revoked=revoked)

    assert (outcome.state, outcome.refusal_code) == (None, RefusalCode.E_REVOKED)
    assert env.cloud.writes_for(b.resource_id) == 0
    assert _refused_unconsumed(env, b.approval_id) == ["E_REVOKED"]
    assert verify_chain(env.engine).ok


def test_the_executing_update_itself_refuses_an_expired_approval(env: Env) -> None:
    """Recovery's move of a ``claimed`` row to ``executing`` demands an unexpired approval
    in its own UPDATE."""
    b = make_test_bundle(4, tag="updexp", ttl=30)  # expires before the lease does
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    leave_claimed(env.executor, env.cloud, b.raw)
    with env.engine.connect() as conn:
        (row,) = ledger_ops.expired(conn, T0 + 20)
    now = T0 + 30
    with env.engine.begin() as conn:
        assert ledger_ops.take_over(conn, row, owner="c", now=T0 + 20, lease_expires=now + 60)
        code = ledger_ops.begin_executing(
            conn, approval_id=b.approval_id, owner="c", epoch=2, now=now, lease_expires=now + 1
        )
    assert code is RefusalCode.E_EXPIRED
    assert _row(env, b.approval_id).state == "claimed"


@pytest.mark.parametrize("why", ["expired", "revoked"])
def test_the_consume_itself_refuses_an_expired_or_revoked_approval(env: Env, why: str) -> None:
    """The INSERT into ``executing`` demands, in the same statement, an unexpired approval
    and no revocation recorded: no row, and why is told, not taken for a replay."""
    b = make_test_bundle(7, tag=f"ins{why[:3]}", ttl=30)
    verified = verify_bundle(b.raw, keyset(), BINDING, T0 + 10)
    work = Work(b.approval_id, verified.action_hash, verified.action, T0 + 30, "c", 1)
    consume = Consume(verified, b.raw, work, lambda conn: None)
    now = T0 + 30 if why == "expired" else T0 + 20
    if why == "revoked":
        _record_revocation(env, b.approval_id)
    row = ledger_row(consume, State.EXECUTING, now=now, lease_expires=now + LEASE)
    with env.engine.begin() as conn:
        assert not ledger_ops.consume(conn, row, now=now)
        assert ledger_ops.why_not_consumed(conn, row, now=now) == why
    with env.engine.connect() as conn:
        assert conn.execute(sa.select(ledger.c.approval_id)).all() == []


def _write_keys(path: Path, status: KeyStatus) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(canonical_bytes(KeySet([approval_signer().trusted_key(status)]).to_value()))
    os.replace(tmp, path)


@pytest.mark.parametrize("state", ["claimed", "executing"])
def test_recovery_does_not_write_a_row_whose_signing_key_was_revoked_since(
    migrated_url: str, tmp_path: Path, state: str
) -> None:
    keys = tmp_path / "trusted-keys.json"
    _write_keys(keys, KeyStatus.ACTIVE)
    cloud = InMemoryCloud()
    clock = FakeClock()

    def worker(name: str, failpoints: Failpoints | None = None) -> Executor:
        return Executor(
            engine=make_engine(migrated_url),
            keys=TrustedKeysFile(keys),
            binding=BINDING,
            reader=cloud,
            writer=cloud,
            signer=receipt_signer(),
            clock=clock,
            worker_id=name,
            lease_seconds=LEASE,
            failpoints=failpoints,
        )

    op, status = ("stop", "Running") if state == "claimed" else ("delete", "Stopped")
    b = make_test_bundle(5, tag=f"krev{state}", operation=op, status=status)
    cloud.add("ecs.instance", b.resource_id, status)
    crashy, rescuer = worker("crashy", _crash_at("after_executing_commit")), worker("rescuer")
    try:
        if state == "claimed":
            leave_claimed(crashy, cloud, b.raw)
        else:
            with pytest.raises(SimulatedCrash):
                crashy.execute(b.raw)
        _write_keys(keys, KeyStatus.REVOKED)  # the operator revokes the compromised key
        clock.advance(LEASE)

        [outcome] = recover_expired(rescuer)
    finally:
        crashy.engine.dispose()
        rescuer.engine.dispose()

    if state == "claimed":
        assert (outcome.state, outcome.refusal_code) == (
            State.REFUSED,
            RefusalCode.E_KEY_REVOKED,
        )
    else:
        assert outcome.state is State.IN_DOUBT
        assert "E_KEY_REVOKED" in outcome.detail and "not re-issued" in outcome.detail
    assert cloud.writes_for(b.resource_id) == 0


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_an_owner_finishing_while_a_rescuer_takes_over_does_not_deadlock(env: Env) -> None:
    """The interleaving that deadlocked: the rescuer holds the row (its take-over UPDATE
    done) while the late owner starts recording its outcome. Both now take the chain
    lock first, so the owner waits for the rescuer and is then fenced."""
    b = make_test_bundle(6, tag="deadlk")
    env.cloud.add("ecs.instance", b.resource_id, "Running")
    slow = env.another_worker("slow", failpoints=_crash_at("after_cloud_call"))
    with pytest.raises(SimulatedCrash):
        slow.execute(b.raw)  # the stop landed; the outcome is not recorded
    env.clock.advance(LEASE)
    row = _row(env, b.approval_id)
    rescuer = env.another_worker("rescuer")
    in_take_over, owner_waiting = threading.Event(), threading.Event()
    real_audit = rescuer.recorder.audit

    def rescuer_audit(conn: Any, now: int, event: dict[str, Any]) -> Any:
        in_take_over.set()
        assert owner_waiting.wait(30)
        return real_audit(conn, now, event)

    rescuer.recorder.audit = rescuer_audit  # type: ignore[method-assign]
    errors: dict[str, BaseException] = {}
    results: dict[str, Any] = {}

    def run(name: str, fn: Callable[[], Any]) -> None:
        try:
            results[name] = fn()
        except BaseException as exc:
            errors[name] = exc

    taker = threading.Thread(target=run, args=("take_over", lambda: rescuer.take_over(row)))
    taker.start()
    assert in_take_over.wait(30)
    stale = Work.from_row(row, owner="slow", epoch=1)
    finisher = threading.Thread(
        target=run,
        args=(
            "finish",
            lambda: slow.recorder.finish(
                stale, State.EXECUTING, State.SUCCEEDED, request_id="late"
            ),
        ),
    )
    finisher.start()
    # Bounded poll: PostgreSQL offers no event for "a session now waits on a lock".
    probe = make_engine(env.url)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with probe.connect() as conn:
                waiting = conn.execute(
                    sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted")
                ).scalar_one()
            if waiting:
                break
            time.sleep(0.01)
        assert waiting, "the finishing owner never waited for the rescuer"
    finally:
        probe.dispose()
    owner_waiting.set()
    taker.join(60)
    finisher.join(60)

    assert "take_over" not in errors, errors
    assert results["take_over"] is not None  # the rescuer owns the row
    assert type(errors.get("finish")).__name__ == "Fenced", errors
    assert _row(env, b.approval_id).state == "executing"
    assert _row(env, b.approval_id).lease_owner == "rescuer"
