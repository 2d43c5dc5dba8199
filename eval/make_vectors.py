"""Generate Airlock's own conformance vectors from fixed inputs: ``python -m eval.make_vectors``.

Writes ``eval/vectors/airlock/{actions,approvals,tool_calls,tool_approvals}.json``.
Inputs are fixed and Ed25519 (RFC 8032) signing is deterministic, so the output never
changes unless the protocol does; ``tests/protocol/test_vectors.py`` fails on any drift.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

from airlock.protocol import (
    APPROVAL_PAYLOAD_TYPE,
    MAX_SAFE_INTEGER,
    ApprovalStatement,
    ProposedAction,
    Refused,
    ToolApprovalStatement,
    ToolCall,
    action_hash,
    canonical_bytes,
    make_bundle,
    pae,
    verify_bundle,
)
from devstack import factory

OUT = Path(__file__).parent / "vectors" / "airlock"


def _action_cases() -> list[tuple[str, dict[str, Any]]]:
    a, aws = factory.action_value, factory.aws_action_value
    ecs = {"type": "ecs.instance", "id": "i-t4n0example"}
    rds = {"type": "rds.instance", "id": "rm-t4n0example"}
    return [
        ("ecs-stop-stopcharging", a()),
        ("ecs-stop-keepcharging", a(params={"stopped_mode": "KeepCharging"})),
        ("ecs-delete", a(resource=ecs, operation="delete", params={})),
        ("rds-stop", a(resource=rds, operation="stop", params={})),
        ("aws-ec2-stop", aws()),
        ("aws-ec2-delete", aws(operation="delete")),
        (
            "aws-rds-stop",
            aws(resource={"type": "rds.instance", "id": "orders-db-2"}, operation="stop"),
        ),
        ("non-ascii-reason", a(reason="空闲 14 天：CPU p95 3.40 % — café, Ünïcödé ✓ 😀")),
        ("non-ascii-evidence-keys", a(evidence={"ö": 1, "€": 2, "a": 3, "😀": 4, "ß": 5})),
        (
            "integers-near-2-53",
            a(evidence={"max": MAX_SAFE_INTEGER, "min": -MAX_SAFE_INTEGER, "zero": 0, "one": 1}),
        ),
        (
            "nested-evidence",
            a(
                evidence={
                    "policy": "idle/v1",
                    "daily": [
                        {"day": i, "cpu_p95_bp": 300 + i, "net": [i, i * 2]} for i in range(3)
                    ],
                    "thresholds": {
                        "cpu": {"avg_bp": 500, "p95_bp": 1000},
                        "net": {"bytes": 5000000},
                    },
                    "flags": [True, False, None],
                }
            ),
        ),
        ("html-and-quotes", a(reason="<script>alert(\"x\")</script> & 'quotes' \\ back\\slash")),
        ("control-characters", a(reason="tab\tnewline\nbell\u0007 nul-free")),
        (
            "empty-absent-tags",
            a(
                precondition={
                    "status": "Stopped",
                    "absent_tags": [],
                    "observed_at": "2025-11-29T06:00:00Z",
                }
            ),
        ),
        (
            "many-absent-tags",
            a(
                precondition={
                    "status": "Running",
                    "absent_tags": ["airlock:protect", "env:prod", "Ω"],
                    "observed_at": "2025-11-29T06:00:00Z",
                }
            ),
        ),
        ("other-region-account", a(account="1234567890123456", region="cn-hangzhou")),
        ("long-series", a(evidence={"cpu_bp": list(range(0, 336 * 7, 7))})),
        # The saving estimate: integers in minor units and millionths, checked for sense.
        (
            "ecs-stop-with-saving",
            a(
                evidence={
                    "policy": "idle/v1",
                    "instance_type": "ecs.g7.large",
                    "saving": {
                        "currency": "USD",
                        "monthly_minor": 8249,
                        "hourly_price_micros": 113000,
                        "hours_per_month": 730,
                        "basis": "compute",
                        "source": "ecs:DescribePrice",
                    },
                }
            ),
        ),
        (
            "ecs-delete-with-saving",
            a(
                resource=ecs,
                operation="delete",
                params={},
                evidence={
                    "policy": "idle/v1",
                    "stage": "delete-after-stop",
                    "saving": {
                        "currency": "USD",
                        "monthly_minor": 0,
                        "hourly_price_micros": 113000,
                        "hours_per_month": 730,
                        "basis": "none",
                        "source": "ecs:DescribePrice",
                    },
                },
            ),
        ),
    ]


def actions() -> list[dict[str, Any]]:
    out = []
    for name, value in _action_cases():
        parsed = ProposedAction.model_validate(value)
        raw = parsed.canonical_bytes()
        out.append(
            {
                "name": name,
                "action": value,
                "canonical_hex": raw.hex(),
                "action_hash": parsed.action_hash(),
            }
        )
    return out


def _approval_cases() -> list[tuple[str, str, dict[str, Any], dict[str, Any], str]]:
    a, s = factory.action_value, factory.statement_value
    ecs_delete = a(
        resource={"type": "ecs.instance", "id": "i-t4n0example"}, operation="delete", params={}
    )
    rds = a(resource={"type": "rds.instance", "id": "rm-t4n0example"}, operation="stop", params={})
    stop = a()
    aws_delete = factory.aws_action_value(operation="delete")
    aws_rds = factory.aws_action_value(
        resource={"type": "rds.instance", "id": "orders-db-2"}, operation="stop"
    )
    aws = factory.AWS_AUDIENCE
    return [
        ("stop-one-approver", "rfc8032-test1", stop, s(stop), "ok"),
        (
            "delete-two-approvers",
            "rfc8032-test2",
            ecs_delete,
            s(
                ecs_delete,
                approval_id="apv_2b2b2b2b2b2b2b2b",
                nonce="00112233445566778899aabbccddeeff",
                approvers=[{"id": "alice", "at": 1764399900}, {"id": "bob", "at": 1764399990}],
                quorum=2,
                policy={"rule": "delete-default", "hash": "sha256:" + "6f" * 32},
                risk="high",
            ),
            "ok",
        ),
        ("rds-stop", "rfc8032-test3", rds, s(rds, approval_id="apv_3c3c3c3c3c3c3c3c"), "ok"),
        (
            "policy-auto",
            "rfc8032-test1",
            stop,
            s(stop, approvers=[{"id": "policy:auto-stop-dev", "at": 1764400000}], risk="low"),
            "ok",
        ),
        (
            "wrong-audience",
            "rfc8032-test1",
            stop,
            s(stop, audience="airlock-executor/staging-ap-southeast-1"),
            "E_AUDIENCE",
        ),
        (
            "expired",
            "rfc8032-test1",
            stop,
            s(stop, issued_at=1764399000, not_before=1764399000, expires_at=1764399900),
            "E_EXPIRED",
        ),
        (
            "target-mismatch",
            "rfc8032-test1",
            stop,
            s(stop, resource={"type": "ecs.instance", "id": "i-t4n0other00"}),
            "E_MISMATCH",
        ),
        ("signed-by-untrusted-key", "rfc8032-test3", stop, s(stop), "E_UNKNOWN_KEY"),
        (
            "aws-ec2-delete-two-approvers",
            "rfc8032-test2",
            aws_delete,
            s(
                aws_delete,
                approval_id="apv_4d4d4d4d4d4d4d4d",
                nonce="ffeeddccbbaa99887766554433221100",
                audience=aws,
                approvers=[{"id": "alice", "at": 1764399900}, {"id": "bob", "at": 1764399990}],
                quorum=2,
                policy={"rule": "delete-default", "hash": "sha256:" + "6f" * 32},
                risk="high",
            ),
            "ok",
        ),
        (
            "aws-rds-stop",
            "rfc8032-test1",
            aws_rds,
            s(aws_rds, approval_id="apv_5e5e5e5e5e5e5e5e", audience=aws),
            "ok",
        ),
        (
            "aws-approval-at-alibaba-executor",
            "rfc8032-test1",
            aws_rds,
            s(aws_rds, approval_id="apv_6f6f6f6f6f6f6f6f"),
            "E_ACCOUNT",
        ),
    ]


def approvals() -> list[dict[str, Any]]:
    trusted = factory.keyset("rfc8032-test1", "rfc8032-test2")
    # rds-stop is signed by test3; trust test3 for that case only, so that the
    # untrusted-key case stays meaningful.
    trusted_with_3 = factory.keyset("rfc8032-test1", "rfc8032-test2", "rfc8032-test3")
    out = []
    for name, seed_name, action, statement_value, expected in _approval_cases():
        signer = factory.signer(seed_name)
        statement = ApprovalStatement.model_validate(statement_value)
        payload = statement.canonical_bytes()
        envelope = signer.sign_statement(statement)
        action_bytes = canonical_bytes(action)
        bundle = make_bundle(action_bytes, envelope)
        keys = trusted_with_3 if name == "rds-stop" else trusted
        # An AWS approval is checked by an AWS executor, save the one that shows it is not.
        at_aws = name.startswith("aws-") and name != "aws-approval-at-alibaba-executor"
        binding = factory.AWS_BINDING if at_aws else factory.BINDING
        try:
            verify_bundle(bundle, keys, binding, factory.NOW)
            observed = "ok"
        except Refused as exc:
            observed = exc.code.value
        if observed != expected:
            raise SystemExit(f"vector {name}: expected {expected}, generator observed {observed}")
        out.append(
            {
                "name": name,
                "seed_hex": factory.RFC8032_SEEDS[seed_name],
                "keyid": signer.keyid,
                "public_key_hex": signer.public_raw.hex(),
                "trusted_keys": keys.to_value(),
                "binding": {
                    "audience": binding.audience,
                    "provider": binding.provider,
                    "account": binding.account,
                    "region": binding.region,
                    "max_ttl": binding.max_ttl,
                    "skew": binding.skew,
                },
                "now": factory.NOW,
                "action_hex": action_bytes.hex(),
                "statement": statement_value,
                "payload_hex": payload.hex(),
                "payload_type": APPROVAL_PAYLOAD_TYPE,
                "pae_hex": pae(APPROVAL_PAYLOAD_TYPE, payload).hex(),
                "signature_b64": base64.b64encode(envelope.signatures[0].sig).decode(),
                "envelope": envelope.to_value(),
                "bundle_b64": base64.b64encode(bundle).decode(),
                "expected": expected,
            }
        )
    return out


def _tool_call_cases() -> list[tuple[str, dict[str, Any]]]:
    t = factory.tool_call_value
    return [
        ("refund-high", t()),
        (
            "email-low",
            t(
                proposal_id="prop_0e1f2a3b4c5d6e7f",
                tool="send_email",
                arguments={"to": "ana@example.com", "subject": "Your refund", "body": "Done."},
                target="ana@example.com",
                effect_key="email:refund-notice:order-881",
                premises={},
                risk="low",
                summary="Email ana@example.com that the refund is done",
            ),
        ),
        (
            "amount-as-decimal-string",
            t(arguments={"order": "order-881", "amount": "125.00", "currency": "EUR"}),
        ),
        (
            "non-ascii-arguments-and-summary",
            t(
                arguments={"note": "Rückerstattung für café — 退款 ✓ 😀", "größe": 1},
                summary="Rückerstattung 125,00 € für Bestellung order-881",
            ),
        ),
        (
            "integers-near-2-53",
            t(arguments={"max": MAX_SAFE_INTEGER, "min": -MAX_SAFE_INTEGER, "zero": 0}),
        ),
        (
            "nested-arguments-at-depth-cap",
            t(arguments={"a": {"b": {"c": {"d": {"e": {"f": {"g": [1, True, None]}}}}}}}),
        ),
        (
            "premise-scalars",
            t(premises={"count": -3, "flag": False, "none": None, "text": "paid in full"}),
        ),
        ("dotted-tool-name", t(tool="payments.refund_v2", risk="medium")),
    ]


def tool_calls() -> list[dict[str, Any]]:
    out = []
    for name, value in _tool_call_cases():
        parsed = ToolCall.model_validate(value)
        raw = parsed.canonical_bytes()
        out.append(
            {
                "name": name,
                "tool_call": value,
                "canonical_hex": raw.hex(),
                "action_hash": parsed.action_hash(),
            }
        )
    return out


def _tool_approval_cases() -> list[tuple[str, dict[str, Any], dict[str, Any], str]]:
    t, s = factory.tool_call_value, factory.tool_statement_value
    refund = t()
    tampered = t(arguments={"order": "order-881", "amount": 125000, "currency": "EUR"})
    cloud = factory.action_value()
    return [
        ("refund-two-approvers", refund, s(refund), "ok"),
        (
            "other-audience",
            refund,
            s(refund, audience="airlock-gate/payments-staging"),
            "E_AUDIENCE",
        ),
        (
            "expired",
            refund,
            s(refund, issued_at=1764399000, not_before=1764399000, expires_at=1764399900),
            "E_EXPIRED",
        ),
        ("tampered-arguments", tampered, s(refund), "E_ACTION_HASH"),
        ("swapped-target", refund, s(refund, target="order-882"), "E_MISMATCH"),
        ("swapped-effect-key", refund, s(refund, effect_key="refund:order-882"), "E_MISMATCH"),
        (
            "cloud-action-under-tool-approval",
            cloud,
            s(refund, action_hash=action_hash(canonical_bytes(cloud))),
            "E_MISMATCH",
        ),
    ]


def tool_approvals() -> list[dict[str, Any]]:
    keys = factory.keyset("rfc8032-test1")
    signer = factory.signer("rfc8032-test1")
    binding = factory.TOOL_BINDING
    out = []
    for name, tool_call, statement_value, expected in _tool_approval_cases():
        payload = ToolApprovalStatement.model_validate(statement_value).canonical_bytes()
        envelope = factory.sign_tool_value(statement_value)
        action_bytes = canonical_bytes(tool_call)
        bundle = make_bundle(action_bytes, envelope)
        try:
            verify_bundle(bundle, keys, binding, factory.NOW)
            observed = "ok"
        except Refused as exc:
            observed = exc.code.value
        if observed != expected:
            raise SystemExit(f"vector {name}: expected {expected}, generator observed {observed}")
        out.append(
            {
                "name": name,
                "seed_hex": factory.RFC8032_SEEDS["rfc8032-test1"],
                "keyid": signer.keyid,
                "public_key_hex": signer.public_raw.hex(),
                "trusted_keys": keys.to_value(),
                "binding": {
                    "audience": binding.audience,
                    "max_ttl": binding.max_ttl,
                    "skew": binding.skew,
                },
                "now": factory.NOW,
                "action_hex": action_bytes.hex(),
                "statement": statement_value,
                "payload_hex": payload.hex(),
                "payload_type": APPROVAL_PAYLOAD_TYPE,
                "pae_hex": pae(APPROVAL_PAYLOAD_TYPE, payload).hex(),
                "signature_b64": base64.b64encode(envelope.signatures[0].sig).decode(),
                "envelope": envelope.to_value(),
                "bundle_b64": base64.b64encode(bundle).decode(),
                "expected": expected,
            }
        )
    return out


def render() -> dict[str, bytes]:
    """File name -> exact bytes to write."""

    def dump(value: Any) -> bytes:
        return (json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False) + "\n").encode()

    return {
        "actions.json": dump(actions()),
        "approvals.json": dump(approvals()),
        "tool_calls.json": dump(tool_calls()),
        "tool_approvals.json": dump(tool_approvals()),
    }


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in render().items():
        (OUT / name).write_bytes(data)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
