"""The execute path: verify, consume once, re-read, write, record.

As docs/protocol.md#executor-checks numbers it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from airlock.cloud.ports import LiveState
from airlock.cloud.tags import ProductionTags
from airlock.protocol import ProposedAction, RefusalCode, b64decode_strict, canonical_bytes
from airlock.store import verify_chain
from services.executor import State, client_token, recover_expired, verify_receipt
from services.executor.checks import precondition_problem
from services.executor.models import ledger, refusals

from .conftest import Env
from .support import T0, TTL, make_test_bundle, receipt_keyset


def _ledger_row(env: Env, approval_id: str) -> sa.RowMapping:
    with env.engine.connect() as conn:
        return (
            conn.execute(sa.select(ledger).where(ledger.c.approval_id == approval_id))
            .mappings()
            .one()
        )


def _refusal_codes(env: Env) -> list[str]:
    with env.engine.connect() as conn:
        return list(conn.execute(sa.select(refusals.c.code).order_by(refusals.c.id)).scalars())


def test_approved_stop_is_written_once_with_a_verifiable_receipt(env: Env) -> None:
    b = make_test_bundle(1)
    env.cloud.add("ecs.instance", b.resource_id)
    outcome = env.executor.execute(b.raw)
    assert outcome.state is State.SUCCEEDED and not outcome.verified
    assert env.cloud.writes == [("stop", b.resource_id, "")]
    assert env.cloud.instances[("ecs.instance", b.resource_id)].status == "Stopped"
    row = _ledger_row(env, b.approval_id)
    assert row["state"] == "succeeded" and row["cloud_request_id"] == "req-1"
    assert outcome.receipt is not None
    receipt = verify_receipt(row["receipt"].encode(), receipt_keyset(), env.clock())
    assert receipt.outcome == "succeeded" and receipt.approval_id == b.approval_id
    assert receipt.cloud_request_id == "req-1" and receipt.refusal_code is None
    # The receipt names the audit head that recorded this outcome.
    report = verify_chain(env.engine, expect_head=(receipt.audit_head.seq, receipt.audit_head.hash))
    assert report.ok, report.fault


def test_replay_is_refused_recorded_and_writes_nothing(env: Env) -> None:
    b = make_test_bundle(2)
    env.cloud.add("ecs.instance", b.resource_id)
    assert env.executor.execute(b.raw).state is State.SUCCEEDED
    env.cloud.set_status("ecs.instance", b.resource_id, "Running")  # someone restarted it
    again = env.executor.execute(b.raw)
    other = env.another_worker("worker-b").execute(b.raw)
    assert again.refusal_code is RefusalCode.E_REPLAY and again.state is None
    assert other.refusal_code is RefusalCode.E_REPLAY
    assert env.cloud.writes_for(b.resource_id) == 1
    assert _refusal_codes(env) == ["E_REPLAY", "E_REPLAY"]
    assert again.receipt is not None
    receipt = verify_receipt(
        canonical_bytes(again.receipt.to_value()), receipt_keyset(), env.clock()
    )
    assert receipt.refusal_code == "E_REPLAY" and receipt.approval_id == b.approval_id
    assert verify_chain(env.engine).ok


def test_same_nonce_under_another_approval_id_is_a_replay(env: Env) -> None:
    """nonce, approval_id and action_hash are each UNIQUE: any one reused is a replay."""
    first = make_test_bundle(3, tag="a")
    env.cloud.add("ecs.instance", first.resource_id)
    assert env.executor.execute(first.raw).state is State.SUCCEEDED
    # Same action bytes (same action hash) approved a second time with a new id/nonce.
    import hashlib

    from airlock.protocol import ApprovalStatement, Envelope, b64decode_strict, loads_strict
    from airlock.protocol import make_bundle as mk

    from .support import approval_signer

    value = loads_strict(first.raw, max_bytes=65536)
    action_bytes = b64decode_strict(value["action"])
    env_value = value["envelope"]
    payload = Envelope.from_value(env_value, payload_type=env_value["payloadType"]).payload
    st = ApprovalStatement.from_json_bytes(payload).model_dump(mode="json")
    st["approval_id"] = "apv_secondapproval"
    st["nonce"] = hashlib.sha256(b"other").hexdigest()[:32]
    second = mk(
        action_bytes,
        approval_signer().sign_statement(ApprovalStatement.model_validate(st)),
    )
    env.cloud.set_status("ecs.instance", first.resource_id, "Running")
    outcome = env.executor.execute(second)
    assert outcome.refusal_code is RefusalCode.E_REPLAY
    assert env.cloud.writes_for(first.resource_id) == 1


@pytest.mark.parametrize(
    "drift",
    [
        "status_changed",
        "protect_tag_added",
        "protect_tag_in_another_case",
        "protect_tag_as_a_value",
        "production_tag_added",
        "production_tag_in_another_case",
        "resource_gone",
    ],
)
def test_precondition_drift_is_refused_with_zero_writes(env: Env, drift: str) -> None:
    b = make_test_bundle(4)
    env.cloud.add("ecs.instance", b.resource_id)
    if drift == "status_changed":
        env.cloud.set_status("ecs.instance", b.resource_id, "Stopped")
    elif drift == "protect_tag_added":
        env.cloud.tag("ecs.instance", b.resource_id, "airlock:protect", "yes")
    elif drift == "protect_tag_in_another_case":
        env.cloud.tag("ecs.instance", b.resource_id, "Airlock:Protect", "true")
    elif drift == "protect_tag_as_a_value":
        env.cloud.tag("ecs.instance", b.resource_id, "owner-note", "AIRLOCK:PROTECT")
    elif drift == "production_tag_added":
        env.cloud.tag("ecs.instance", b.resource_id, "env", "prod")
    elif drift == "production_tag_in_another_case":
        env.cloud.tag("ecs.instance", b.resource_id, "Environment", "Production-EU")
    else:
        del env.cloud.instances[("ecs.instance", b.resource_id)]
    outcome = env.executor.execute(b.raw)
    assert outcome.state is State.REFUSED
    assert outcome.refusal_code is RefusalCode.E_PRECONDITION
    assert env.cloud.calls == []
    row = _ledger_row(env, b.approval_id)
    assert row["state"] == "refused" and row["refusal_code"] == "E_PRECONDITION"
    # The approval is used up: presenting it again is a replay, still zero writes.
    env.cloud.add("ecs.instance", b.resource_id)
    assert env.executor.execute(b.raw).refusal_code is RefusalCode.E_REPLAY
    assert env.cloud.calls == []
    assert verify_chain(env.engine).ok


def test_tampered_bundle_is_refused_recorded_and_writes_nothing(env: Env) -> None:
    b = make_test_bundle(5)
    env.cloud.add("ecs.instance", b.resource_id)
    tampered = b.raw.replace(b'"sig":"', b'"sig":"A', 1)
    outcome = env.executor.execute(tampered)
    assert outcome.state is None and outcome.refusal_code is not None
    outcome = env.executor.execute(b"{not json")
    assert outcome.refusal_code is RefusalCode.E_PARSE
    assert env.cloud.calls == []
    assert len(_refusal_codes(env)) == 2
    # A refused forgery does not burn the genuine approval.
    assert env.executor.execute(b.raw).state is State.SUCCEEDED


def test_expired_approval_is_refused_and_recorded(env: Env) -> None:
    b = make_test_bundle(6)
    env.cloud.add("ecs.instance", b.resource_id)
    env.clock.now = T0 + TTL
    outcome = env.executor.execute(b.raw)
    assert outcome.refusal_code is RefusalCode.E_EXPIRED
    assert _refusal_codes(env) == ["E_EXPIRED"] and env.cloud.calls == []


def test_revoked_approval_is_refused(env: Env) -> None:
    b = make_test_bundle(7)
    env.cloud.add("ecs.instance", b.resource_id)
    outcome = env.executor.execute(b.raw, revoked={b.approval_id})
    assert outcome.refusal_code is RefusalCode.E_REVOKED and env.cloud.calls == []


def test_definite_refusal_by_the_provider_is_failed(env: Env) -> None:
    b = make_test_bundle(8)
    env.cloud.add("ecs.instance", b.resource_id)
    env.cloud.next_fault = "refuse"
    outcome = env.executor.execute(b.raw)
    assert outcome.state is State.FAILED and len(env.cloud.calls) == 1


def test_timeout_after_the_effect_is_probed_and_marked_verified(env: Env) -> None:
    b = make_test_bundle(9)
    env.cloud.add("ecs.instance", b.resource_id)
    env.cloud.next_fault = "timeout_after"
    outcome = env.executor.execute(b.raw)
    assert outcome.state is State.SUCCEEDED and outcome.verified
    assert env.cloud.writes_for(b.resource_id) == 1 and len(env.cloud.calls) == 1


def test_timeout_of_a_stop_is_never_blindly_retried(env: Env) -> None:
    b = make_test_bundle(10)
    env.cloud.add("ecs.instance", b.resource_id)
    env.cloud.next_fault = "timeout_before"
    outcome = env.executor.execute(b.raw)
    assert outcome.state is State.IN_DOUBT
    assert len(env.cloud.calls) == 1 and env.cloud.writes == []


def test_timeout_of_a_delete_is_reissued_with_the_same_client_token(env: Env) -> None:
    b = make_test_bundle(11, operation="delete", status="Stopped")
    env.cloud.add("ecs.instance", b.resource_id, status="Stopped")
    env.cloud.next_fault = "timeout_before"
    outcome = env.executor.execute(b.raw)
    assert outcome.state is State.SUCCEEDED
    token = client_token(b.approval_id)
    assert [c[2] for c in env.cloud.calls] == [token, token]
    assert env.cloud.writes_for(b.resource_id) == 1


@pytest.mark.parametrize(
    ("started_at", "deleted"),
    [
        ("2025-11-29T05:59:00Z", True),  # last start in the minute before the observation
        ("2025-11-29T06:00:00Z", False),  # the same minute (ECS's precision): maybe after
        ("2025-11-29T06:01:00Z", False),  # started (and stopped again) since
        ("", False),  # the provider does not say: cannot establish it stayed stopped
        ("2025-11-29T06:01Z", False),  # not the adapter's form: unknown, so refused
    ],
)
def test_a_delete_of_an_instance_started_since_it_was_observed_is_refused(
    env: Env, started_at: str, deleted: bool
) -> None:
    """Stopped now is not "stayed stopped": someone may have started the instance after the
    agent saw it stopped (observed_at 06:00:00Z) and stopped it again by hand (found in
    review). The signed precondition only says status and tags; the executor checks this
    too before a delete, and only before a delete."""
    b = make_test_bundle(14, operation="delete", status="Stopped")
    env.cloud.add("ecs.instance", b.resource_id, status="Stopped")
    env.cloud.started("ecs.instance", b.resource_id, started_at)
    outcome = env.executor.execute(b.raw)
    if deleted:
        assert outcome.state is State.SUCCEEDED
        assert env.cloud.writes_for(b.resource_id) == 1
    else:
        assert outcome.refusal_code is RefusalCode.E_PRECONDITION
        assert "start" in outcome.detail
        assert env.cloud.calls == []


def test_a_stop_does_not_look_at_the_last_start(env: Env) -> None:
    b = make_test_bundle(15)
    env.cloud.add("ecs.instance", b.resource_id)
    env.cloud.started("ecs.instance", b.resource_id, "2026-11-29T06:01:00Z")
    assert env.executor.execute(b.raw).state is State.SUCCEEDED


def test_rds_stop_is_written(env: Env) -> None:
    b = make_test_bundle(12, resource_type="rds.instance")
    env.cloud.add("rds.instance", b.resource_id)
    assert env.executor.execute(b.raw).state is State.SUCCEEDED
    assert env.cloud.writes == [("stop", b.resource_id, "")]


def test_unreadable_live_state_leaves_the_row_claimed_for_the_next_recovery_pass(
    env: Env,
) -> None:
    """A re-read that fails (a passing 503) writes nothing and ends the consuming worker's
    lease at once, audited: the next recovery pass continues the row, not the lease's end."""
    b = make_test_bundle(13)
    env.cloud.add("ecs.instance", b.resource_id)
    env.cloud.read_fails = True
    outcome = env.executor.execute(b.raw)
    assert outcome.state is State.CLAIMED and env.cloud.calls == []
    (released,) = _events(env, "executor.lease_released")
    assert released["approval_id"] == b.approval_id and "re-read failed" in released["detail"]
    # Still unreadable: the pass that continues it writes nothing either, and keeps its
    # lease this time, so a provider that keeps refusing is asked once a lease.
    (again,) = recover_expired(env.another_worker("worker-b"))
    assert again.state is State.CLAIMED and env.cloud.writes == []
    assert len(_events(env, "executor.lease_released")) == 1
    assert recover_expired(env.another_worker("worker-c")) == []
    env.cloud.read_fails = False
    env.clock.advance(env.executor.lease_seconds)
    (recovered,) = recover_expired(env.another_worker("worker-c"))
    assert recovered.state is State.SUCCEEDED and env.cloud.writes_for(b.resource_id) == 1
    assert recover_expired(env.executor) == []
    assert env.cloud.writes_for(b.resource_id) == 1
    assert verify_chain(env.engine).ok


def _events(env: Env, kind: str) -> list[dict[str, Any]]:
    with env.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT event FROM audit_log ORDER BY seq").scalars()
        events = [json.loads(row) for row in rows]
    return [e for e in events if e["type"] == kind]


@pytest.mark.parametrize(
    ("production", "tags", "refused"),
    [
        (ProductionTags(), {"env": "staging", "team": "prod-infra"}, False),
        (ProductionTags(), {"ENV": "PROD"}, True),
        (ProductionTags(("stage",), "live"), {"env": "prod"}, False),
        (ProductionTags(("stage",), "live"), {"Stage": "Live-1"}, True),
        (ProductionTags(()), {"env": "prod"}, False),
        (None, {"env": "prod"}, False),
    ],
)
def test_production_tags_are_read_as_configured(
    production: ProductionTags | None, tags: dict[str, str], refused: bool
) -> None:
    """Only a configured key with a value starting with the prefix, in any case; no keys
    (``AIRLOCK_EXECUTOR_PROD_TAG_KEYS=[]``) or no policy turns the check off."""
    b = make_test_bundle(41)
    action = ProposedAction.from_json_bytes(b64decode_strict(json.loads(b.raw)["action"]))
    live = LiveState("ecs.instance", b.resource_id, "ap-southeast-1", "Running", tags=tags)
    problem = precondition_problem(action, live, production)
    assert (problem is not None) is refused
    if refused:
        assert problem is not None and problem.startswith("production tag now present: ")
