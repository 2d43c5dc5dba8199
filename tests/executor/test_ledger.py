"""The ledger's guarantees (docs/protocol.md#ledger): immutable terminal rows, fencing, recovery,
human resolution, receipts, and a tamper-evident audit chain."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from airlock.protocol import RefusalCode, canonical_bytes
from airlock.store import verify_chain
from services.executor import (
    ConfigError,
    Failpoints,
    OperatorRefusal,
    ReceiptSigner,
    ResolutionError,
    State,
    generate_receipt_key,
    verify_receipt,
)
from services.executor.errors import SimulatedCrash
from services.executor.models import ledger, outbox, refusals, resolutions
from services.executor.recover import recover_expired

from .conftest import Env
from .support import TTL, leave_claimed, make_test_bundle, receipt_keyset


def _crash_at(point: str) -> Failpoints:
    def _raise(p: str) -> None:
        raise SimulatedCrash(p)

    return Failpoints(frozenset({point}), action=_raise)


def _raw(env: Env, statement: str) -> None:
    with env.engine.begin() as conn:
        conn.exec_driver_sql(statement)


def _state(env: Env, approval_id: str) -> str | None:
    with env.engine.connect() as conn:
        state = conn.execute(
            sa.select(ledger.c.state).where(ledger.c.approval_id == approval_id)
        ).scalar_one_or_none()
    return None if state is None else str(state)


@pytest.mark.parametrize("terminal", ["succeeded", "refused"])
def test_terminal_rows_cannot_be_updated_or_deleted(env: Env, terminal: str) -> None:
    b = make_test_bundle(1)
    if terminal == "succeeded":
        env.cloud.add("ecs.instance", b.resource_id)
    assert env.executor.execute(b.raw).state == State(terminal)
    assert env.executor.execute(b.raw).refusal_code is RefusalCode.E_REPLAY
    aid = b.approval_id
    for statement in (
        f"UPDATE executor_ledger SET state = 'executing' WHERE approval_id = '{aid}'",
        f"UPDATE executor_ledger SET detail = 'rewritten' WHERE approval_id = '{aid}'",
        f"UPDATE executor_ledger SET receipt = NULL WHERE approval_id = '{aid}'",
        f"DELETE FROM executor_ledger WHERE approval_id = '{aid}'",
        "DELETE FROM executor_refusals",
        "UPDATE executor_refusals SET code = 'E_NONE'",
    ):
        with pytest.raises(DBAPIError):
            _raw(env, statement)
    assert _state(env, aid) == terminal


def test_active_rows_allow_only_the_designed_transitions(env: Env) -> None:
    b = make_test_bundle(2)
    env.cloud.add("ecs.instance", b.resource_id)
    leave_claimed(env.executor, env.cloud, b.raw)
    aid = b.approval_id
    assert _state(env, aid) == "claimed"
    for statement in (
        f"UPDATE executor_ledger SET state = 'succeeded' WHERE approval_id = '{aid}'",
        f"UPDATE executor_ledger SET nonce = 'ff' WHERE approval_id = '{aid}'",
        f"UPDATE executor_ledger SET action_hash = 'sha256:00' WHERE approval_id = '{aid}'",
        f"UPDATE executor_ledger SET lease_epoch = 0 WHERE approval_id = '{aid}'",
        f"DELETE FROM executor_ledger WHERE approval_id = '{aid}'",
    ):
        with pytest.raises(DBAPIError):
            _raw(env, statement)
    assert _state(env, aid) == "claimed"


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("resource_id", "'i-t4n0someother'"),
        ("resource_type", "'rds.instance'"),
        ("region", "'eu-central-1'"),
        ("operation", "'delete'"),
        ("proposal_id", "'prop_someother01'"),
        ("keyid", "'ed25519:00'"),
    ],
)
def test_a_claimed_row_cannot_be_retargeted_for_whoever_reads_it(
    env: Env, column: str, value: str
) -> None:
    """The columns copied from the signed action name the target to people (``airlock
    executor ledger``, whoever resolves an in_doubt row): no UPDATE changes them."""
    b = make_test_bundle(4)
    env.cloud.add("ecs.instance", b.resource_id)
    leave_claimed(env.executor, env.cloud, b.raw)
    aid = b.approval_id
    with pytest.raises(DBAPIError, match="identity columns are immutable"):
        _raw(env, f"UPDATE executor_ledger SET {column} = {value} WHERE approval_id = '{aid}'")
    with env.engine.connect() as conn:
        row = conn.execute(sa.select(ledger).where(ledger.c.approval_id == aid)).one()
    assert (row.state, row.resource_id, row.region) == ("claimed", b.resource_id, "ap-southeast-1")
    # What may change still does: the lease (recovery's takeover bumps the epoch).
    _raw(env, f"UPDATE executor_ledger SET lease_epoch = 9 WHERE approval_id = '{aid}'")


def test_a_fenced_off_owner_cannot_record_an_outcome(env: Env) -> None:
    """A slow worker whose lease was taken over matches zero rows and stops."""
    b = make_test_bundle(3)
    env.cloud.add("ecs.instance", b.resource_id)
    slow = env.another_worker("slow", failpoints=_crash_at("after_executing_commit"))
    with pytest.raises(SimulatedCrash):
        slow.execute(b.raw)
    env.clock.advance(env.executor.lease_seconds)
    (recovered,) = recover_expired(env.another_worker("rescuer"))
    # A stop has no provider token and its effect is not visible: in doubt, no retry.
    assert recovered.state is State.IN_DOUBT and env.cloud.calls == []
    # The slow worker wakes up and tries to go on with its old epoch.
    from services.executor.errors import Fenced
    from services.executor.models import Work

    with env.engine.connect() as conn:
        row = conn.execute(sa.select(ledger).where(ledger.c.approval_id == b.approval_id))
        epoch = row.mappings().one()["lease_epoch"]
    assert epoch == 2
    from services.executor.models import LedgerRow

    with env.engine.connect() as conn:
        mapping = (
            conn.execute(sa.select(ledger).where(ledger.c.approval_id == b.approval_id))
            .mappings()
            .one()
        )
    stale = Work.from_row(LedgerRow.from_mapping(mapping), owner="slow", epoch=1)
    with pytest.raises(Fenced):
        slow.recorder.finish(stale, State.EXECUTING, State.SUCCEEDED, request_id="late")
    assert _state(env, b.approval_id) == "in_doubt"
    assert verify_chain(env.engine).ok


@pytest.mark.parametrize(
    ("point", "operation", "expected"),
    [
        ("before_consume", "stop", None),
        ("after_executing_commit", "stop", State.IN_DOUBT),
        ("after_executing_commit", "delete", State.SUCCEEDED),
        ("after_cloud_call", "stop", State.SUCCEEDED),
        ("after_outcome_commit", "stop", State.SUCCEEDED),
    ],
)
def test_recovery_after_a_crash_is_verify_first(
    env: Env, point: str, operation: str, expected: State | None
) -> None:
    status = "Stopped" if operation == "delete" else "Running"
    b = make_test_bundle(4, operation=operation, status=status)
    env.cloud.add("ecs.instance", b.resource_id, status=status)
    crashy = env.another_worker("crashy", failpoints=_crash_at(point))
    with pytest.raises(SimulatedCrash):
        crashy.execute(b.raw)
    env.clock.advance(env.executor.lease_seconds)
    recover_expired(env.executor)
    if expected is None:
        # Nothing was committed: no row to recover, and the bundle delivered again (as
        # the feed does, its cursor never moved) is written once.
        assert _state(env, b.approval_id) is None and env.cloud.writes_for(b.resource_id) == 0
        assert env.executor.execute(b.raw).state is State.SUCCEEDED
        expected = State.SUCCEEDED
    assert _state(env, b.approval_id) == expected
    assert env.cloud.writes_for(b.resource_id) == (0 if expected is State.IN_DOUBT else 1)
    assert env.executor.execute(b.raw).refusal_code is RefusalCode.E_REPLAY
    assert verify_chain(env.engine).ok


def test_claimed_row_past_its_expiry_is_refused_on_recovery(env: Env) -> None:
    b = make_test_bundle(5)
    env.cloud.add("ecs.instance", b.resource_id)
    leave_claimed(env.another_worker("crashy"), env.cloud, b.raw)
    env.clock.advance(TTL)
    (outcome,) = recover_expired(env.executor)
    assert outcome.state is State.REFUSED and outcome.refusal_code is RefusalCode.E_EXPIRED
    assert env.cloud.calls == []


def test_in_doubt_is_resolved_only_by_an_audited_human_decision(env: Env) -> None:
    b = make_test_bundle(6)
    env.cloud.add("ecs.instance", b.resource_id)
    env.cloud.next_fault = "timeout_before"
    assert env.executor.execute(b.raw).state is State.IN_DOUBT
    with pytest.raises(ResolutionError):
        env.executor.resolve(b.approval_id, happened=False, by="  ", note="")
    outcome = env.executor.resolve(
        b.approval_id, happened=False, by="alice", note="console shows Running"
    )
    assert outcome.receipt is not None
    receipt = verify_receipt(
        canonical_bytes(outcome.receipt.to_value()), receipt_keyset(), env.clock()
    )
    assert receipt.outcome == "resolved" and receipt.resolution is not None
    assert (receipt.resolution.decision, receipt.resolution.by) == ("did_not_happen", "alice")
    with pytest.raises(ResolutionError, match="already resolved"):
        env.executor.resolve(b.approval_id, happened=True, by="bob", note="")
    with pytest.raises(DBAPIError):
        _raw(env, "UPDATE executor_resolutions SET decision = 'happened'")
    with env.engine.connect() as conn:
        decided = conn.execute(sa.select(resolutions.c.decided_by)).scalars().all()
    assert decided == ["alice"]
    assert _state(env, b.approval_id) == "in_doubt"
    events = [line for line in _events(env) if '"type":"executor.resolved"' in line]
    assert len(events) == 1 and '"by":"alice"' in events[0]


def test_only_in_doubt_rows_can_be_resolved(env: Env) -> None:
    b = make_test_bundle(7)
    env.cloud.add("ecs.instance", b.resource_id)
    env.executor.execute(b.raw)
    with pytest.raises(ResolutionError, match="not in_doubt") as not_in_doubt:
        env.executor.resolve(b.approval_id, happened=True, by="alice", note="")
    assert not_in_doubt.value.code is OperatorRefusal.E_NOT_IN_DOUBT
    with pytest.raises(ResolutionError, match="no ledger row") as unknown:
        env.executor.resolve("apv_doesnotexist", happened=True, by="alice", note="")
    assert unknown.value.code is OperatorRefusal.E_NOT_FOUND
    assert _state(env, b.approval_id) == "succeeded"


def test_every_refused_resolution_is_audited_with_its_code(env: Env) -> None:
    b = make_test_bundle(8)
    env.cloud.add("ecs.instance", b.resource_id)
    env.cloud.next_fault = "timeout_before"
    assert env.executor.execute(b.raw).state is State.IN_DOUBT
    attempts = [
        ("apv_doesnotexist", True, "alice", "", OperatorRefusal.E_NOT_FOUND),
        (b.approval_id, True, " ", "", OperatorRefusal.E_INVALID),
        (b.approval_id, True, "alice", "x" * 3000, OperatorRefusal.E_INVALID),
    ]
    for approval_id, happened, by, note, code in attempts:
        with pytest.raises(ResolutionError) as refused:
            env.executor.resolve(approval_id, happened=happened, by=by, note=note)
        assert refused.value.code is code
    env.executor.resolve(b.approval_id, happened=False, by="alice", note="console: Running")
    with pytest.raises(ResolutionError) as again:
        env.executor.resolve(b.approval_id, happened=True, by="m\u202eallory", note="")
    assert again.value.code is OperatorRefusal.E_ALREADY_RESOLVED
    events = [json.loads(e) for e in _events(env)]
    refusals = [e for e in events if e["type"] == "executor.resolution_refused"]
    assert [(e["code"], e["approval_id"], e["by"]) for e in refusals] == [
        ("E_NOT_FOUND", "apv_doesnotexist", "alice"),
        ("E_INVALID", b.approval_id, ""),
        ("E_INVALID", b.approval_id, "alice"),
        ("E_ALREADY_RESOLVED", b.approval_id, "m\\u202eallory"),
    ]
    assert refusals[-1]["decision"] == "happened"
    # The decision stands as the one resolution; the refusals changed nothing else.
    assert [e["by"] for e in events if e["type"] == "executor.resolved"] == ["alice"]
    assert verify_chain(env.engine).ok


def _resolution_side_effects(env: Env) -> tuple[object, ...]:
    with env.engine.connect() as conn:
        return (
            conn.execute(sa.select(resolutions)).all(),
            conn.execute(sa.select(outbox).where(outbox.c.kind == "resolution")).all(),
            conn.execute(sa.select(ledger.c.state)).scalars().all(),
        )


def test_any_invalid_input_to_resolve_is_an_audited_refusal_that_changes_nothing(
    env: Env,
) -> None:
    """A name longer than the receipt's Resolution.by allows used to escape as pydantic's
    ValidationError: no stable code, no audit record (found in review)."""
    b = make_test_bundle(9)
    env.cloud.add("ecs.instance", b.resource_id)
    env.cloud.next_fault = "timeout_before"
    assert env.executor.execute(b.raw).state is State.IN_DOUBT
    before = _resolution_side_effects(env)
    refused_before = len(_refusal_events(env))
    invalid: list[tuple[Any, Any, Any, Any]] = [
        (b.approval_id, False, "a" * 129, "x"),
        (b.approval_id, False, f"  {'b' * 129}  ", "x"),
        (b.approval_id, False, None, "x"),
        (b.approval_id, False, "alice", None),
        (None, False, "alice", ""),
        (b.approval_id, "yes", "alice", ""),
    ]
    for approval_id, happened, by, note in invalid:
        with pytest.raises(ResolutionError) as refused:
            env.executor.resolve(approval_id, happened=happened, by=by, note=note)
        assert refused.value.code is OperatorRefusal.E_INVALID
    assert _resolution_side_effects(env) == before
    events = _refusal_events(env)[refused_before:]
    assert [(e["code"], e["approval_id"], e["decision"]) for e in events] == [
        ("E_INVALID", b.approval_id, "did_not_happen"),
        ("E_INVALID", b.approval_id, "did_not_happen"),
        ("E_INVALID", b.approval_id, "did_not_happen"),
        ("E_INVALID", b.approval_id, "did_not_happen"),
        ("E_INVALID", "None", "did_not_happen"),
        ("E_INVALID", b.approval_id, "did_not_happen"),
    ]
    assert events[0]["by"] == "a" * 119 + "~"  # clipped as every refusal's input is
    assert "at most 128 characters" in events[0]["detail"]
    assert [e["by"] for e in events[2:4]] == ["None", "alice"]
    # The longest name the receipt holds is taken; the refusals left nothing behind.
    outcome = env.executor.resolve(b.approval_id, happened=False, by="c" * 128, note="")
    assert outcome.receipt is not None
    assert verify_chain(env.engine).ok


def test_executor_resolve_with_an_overlong_name_is_one_line_exit_2_and_audited(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from airlock.cli import app

    from .support import ACCOUNT, AUDIENCE, keyset

    b = make_test_bundle(10)
    env.cloud.add("ecs.instance", b.resource_id)
    env.cloud.next_fault = "timeout_before"
    assert env.executor.execute(b.raw).state is State.IN_DOUBT
    monkeypatch.chdir(tmp_path)  # no stray .env
    trusted = tmp_path / "trusted.json"
    trusted.write_bytes(canonical_bytes(keyset().to_value()))
    for name, value in {
        "AIRLOCK_ENV": "dev",
        "AIRLOCK_EXECUTOR_DATABASE_URL": env.url,
        "AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH": str(trusted),
        "AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH": str(tmp_path / "receipt.pem"),
        "AIRLOCK_EXECUTOR_AUDIENCE": AUDIENCE,
        "AIRLOCK_EXECUTOR_ACCOUNT": ACCOUNT,
    }.items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    assert runner.invoke(app, ["executor", "keygen"]).exit_code == 0
    before = _resolution_side_effects(env)
    refused_before = len(_refusal_events(env))
    result = runner.invoke(
        app, ["executor", "resolve", b.approval_id, "--by", "a" * 129, "--did-not-happen"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        "error: E_INVALID: who decided is named in at most 128 characters"
    ]
    assert "Traceback" not in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)
    assert _resolution_side_effects(env) == before
    [event] = _refusal_events(env)[refused_before:]
    assert (event["code"], event["approval_id"]) == ("E_INVALID", b.approval_id)


def test_executor_resolve_takes_the_proposal_id_and_prints_a_summary(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It answered a proposal id with E_NOT_FOUND and printed the raw receipt JSON."""
    from typer.testing import CliRunner

    from airlock.cli import app

    from .support import ACCOUNT, AUDIENCE, keyset

    doubtful = []
    for n in (11, 12):
        b = make_test_bundle(n)
        env.cloud.add("ecs.instance", b.resource_id)
        env.cloud.next_fault = "timeout_before"
        assert env.executor.execute(b.raw).state is State.IN_DOUBT
        doubtful.append(b)
    monkeypatch.chdir(tmp_path)  # no stray .env
    trusted = tmp_path / "trusted.json"
    trusted.write_bytes(canonical_bytes(keyset().to_value()))
    for name, value in {
        "AIRLOCK_ENV": "dev",
        "AIRLOCK_EXECUTOR_DATABASE_URL": env.url,
        "AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH": str(trusted),
        "AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH": str(tmp_path / "receipt.pem"),
        "AIRLOCK_EXECUTOR_AUDIENCE": AUDIENCE,
        "AIRLOCK_EXECUTOR_ACCOUNT": ACCOUNT,
    }.items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    assert runner.invoke(app, ["executor", "keygen"]).exit_code == 0
    first, second = doubtful
    proposal_id = first.approval_id.replace("apv_", "prop_", 1)  # make_test_bundle's ids

    result = runner.invoke(
        app, ["executor", "resolve", proposal_id, "--by", "alice", "--did-not-happen"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"resolved {first.approval_id}: it did not happen (by alice)",
        "receipt queued: the executor daemon delivers it to the checkpoint",
    ]
    again = runner.invoke(app, ["executor", "resolve", proposal_id, "--by", "a", "--happened"])
    assert again.exit_code == 2 and "E_ALREADY_RESOLVED" in again.output, again.output

    whole = runner.invoke(
        app, ["executor", "resolve", second.approval_id, "--by", "bob", "--happened", "--json"]
    )
    assert whole.exit_code == 0, whole.output
    receipt = json.loads(whole.output)
    assert receipt["payloadType"] == "application/vnd.airlock.receipt.v1+json"

    unknown = runner.invoke(
        app, ["executor", "resolve", "prop_nosuch000001", "--by", "a", "--happened"]
    )
    assert unknown.exit_code == 2
    assert unknown.output.splitlines() == [
        "error: E_NOT_FOUND: no ledger row for prop_nosuch000001"
    ]


def _refusal_events(env: Env) -> list[dict[str, Any]]:
    events = [json.loads(e) for e in _events(env)]
    return [e for e in events if e["type"] == "executor.resolution_refused"]


def _events(env: Env) -> list[str]:
    with env.engine.connect() as conn:
        return list(conn.exec_driver_sql("SELECT event FROM audit_log ORDER BY seq").scalars())


def test_tampering_with_any_executor_audit_row_is_detected(env: Env) -> None:
    for n, fault in enumerate(["none", "refuse", "timeout_before"]):
        b = make_test_bundle(10 + n)
        env.cloud.add("ecs.instance", b.resource_id)
        env.cloud.next_fault = None if fault == "none" else fault
        env.executor.execute(b.raw)
    env.executor.execute(make_test_bundle(10).raw)  # a replay
    assert verify_chain(env.engine).ok
    with env.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT seq, event FROM audit_log ORDER BY seq").all()
    assert len(rows) >= 8
    postgres = env.engine.dialect.name == "postgresql"
    # An attacker with the database can drop the append-only triggers; the chain still
    # names the first row they touched.
    if postgres:
        _raw(env, "ALTER TABLE audit_log DISABLE TRIGGER USER")
    else:
        _raw(env, "DROP TRIGGER audit_log_no_update")
    for seq, event in rows:
        forged = event.replace('"type":"', '"type":"x', 1)
        with env.engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE audit_log SET event = %s WHERE seq = %s"
                if postgres
                else "UPDATE audit_log SET event = ? WHERE seq = ?",
                (forged, seq),
            )
        report = verify_chain(env.engine)
        assert report.fault is not None and report.fault.seq == seq
        with env.engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE audit_log SET event = %s WHERE seq = %s"
                if postgres
                else "UPDATE audit_log SET event = ? WHERE seq = ?",
                (event, seq),
            )
    assert verify_chain(env.engine).ok


def test_airlock_audit_verify_names_the_tampered_executor_row(env: Env) -> None:
    from typer.testing import CliRunner

    from airlock.cli import app

    b = make_test_bundle(20)
    env.cloud.add("ecs.instance", b.resource_id)
    env.executor.execute(b.raw)
    runner = CliRunner()
    ok = runner.invoke(app, ["audit", "verify", "--db", env.url])
    assert ok.exit_code == 0, ok.output
    if env.engine.dialect.name == "postgresql":
        _raw(env, "ALTER TABLE audit_log DISABLE TRIGGER USER")
    else:
        _raw(env, "DROP TRIGGER audit_log_no_update")
    # The first row naming the worker: seq 2 on one lane, later where lanes were declared.
    with env.engine.connect() as conn:
        seq = conn.execute(
            sa.text("SELECT min(seq) FROM audit_log WHERE event LIKE '%worker-a%'")
        ).scalar_one()
    _raw(
        env,
        f"UPDATE audit_log SET event = replace(event, 'worker-a', 'worker-z') WHERE seq = {seq}",
    )
    bad = runner.invoke(app, ["audit", "verify", "--db", env.url])
    assert bad.exit_code == 1 and f"seq {seq}" in bad.output


def test_refusals_table_records_the_bundle_digest_not_unauthenticated_ids(env: Env) -> None:
    b = make_test_bundle(21)
    env.executor.execute(b.raw.replace(b'"sig":"', b'"sig":"A', 1))
    with env.engine.connect() as conn:
        row = conn.execute(sa.select(refusals)).mappings().one()
    assert row["approval_id"] is None and row["bundle_sha256"].startswith("sha256:")


def test_receipt_key_must_be_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "receipt.pem"
    signer = generate_receipt_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ReceiptSigner.from_file(path).keyid == signer.keyid
    with pytest.raises(FileExistsError):
        generate_receipt_key(path)  # never overwrite a key
    os.chmod(path, 0o640)
    with pytest.raises(ConfigError, match="0600"):
        ReceiptSigner.from_file(path)


def test_receipts_do_not_verify_under_the_approval_key(env: Env) -> None:
    from services.executor import InvalidReceipt

    from .support import keyset

    b = make_test_bundle(22)
    env.cloud.add("ecs.instance", b.resource_id)
    outcome = env.executor.execute(b.raw)
    assert outcome.receipt is not None
    data = canonical_bytes(outcome.receipt.to_value())
    with pytest.raises(InvalidReceipt):
        verify_receipt(data, keyset(), env.clock())
    tampered = data.replace(b'"payload":"', b'"payload":"ey', 1)
    with pytest.raises(InvalidReceipt):
        verify_receipt(tampered, receipt_keyset(), env.clock())


def test_failpoints_cannot_be_armed_outside_dev() -> None:
    with pytest.raises(ConfigError, match="AIRLOCK_ENV"):
        Failpoints.from_env({"AIRLOCK_EXECUTOR_FAILPOINTS": "before_consume"})
    with pytest.raises(ConfigError, match="AIRLOCK_ENV"):
        Failpoints.from_env(
            {"AIRLOCK_EXECUTOR_FAILPOINTS": "before_consume", "AIRLOCK_ENV": "prod"}
        )
    with pytest.raises(ConfigError, match="unknown"):
        Failpoints.from_env({"AIRLOCK_EXECUTOR_FAILPOINTS": "before_lunch", "AIRLOCK_ENV": "dev"})
    armed = Failpoints.from_env(
        {"AIRLOCK_EXECUTOR_FAILPOINTS": "before_consume", "AIRLOCK_ENV": "dev"}
    )
    assert armed.armed == {"before_consume"}
    assert Failpoints.from_env({}).armed == frozenset()


def test_refusal_of_an_authenticated_approval_records_its_id(env: Env) -> None:
    b = make_test_bundle(23)
    env.cloud.add("ecs.instance", b.resource_id)
    outcome = env.executor.execute(b.raw, revoked={b.approval_id})
    assert (outcome.refusal_code, outcome.approval_id) == (RefusalCode.E_REVOKED, b.approval_id)
    with env.engine.connect() as conn:
        row = conn.execute(sa.select(refusals)).mappings().one()
    assert row["approval_id"] == b.approval_id
    assert env.cloud.writes == []
