"""Attacks on the executor with crafted bundles (docs/protocol.md#executor-checks steps 1–12).

The attacker holds a real, unused approval — issued by the ``hold`` checkpoint, which no
executor listens to — and presents edited bytes to a running executor daemon (E2, which
shares the ledger with the stack's executor). Each target instance exists and is in a
state where the write would succeed, so zero writes in the cloud's record means the
executor refused, not that the cloud did.
"""

from __future__ import annotations

import base64
import json
import secrets

from airlock.protocol import APPROVAL_PAYLOAD_TYPE, action_hash, canonical_bytes
from devstack import factory

from .common import (
    approved,
    approved_bundle,
    bundle,
    decode_bundle,
    executor_refusal,
    resource,
    stop_action,
)
from .registry import Observation, Target, attack
from .rig import Rig

__all__: list[str] = []


def _swap(rig: Rig, t: Target, label: str, edit: dict[str, object]) -> Observation:
    """Approve a stop of instance 0, present the same envelope with ``edit`` applied to
    the action; the target named by the edit exists and is running."""
    raw = approved_bundle(rig, rig.hold, stop_action(t))
    action_bytes, envelope = decode_bundle(raw)
    action = json.loads(action_bytes)
    action.update(edit)
    res = rig.present(bundle(action, envelope), label)
    return executor_refusal(rig, res, (t.instance(0), t.instance(1)))


@attack(
    "swapped_target",
    surface="executor",
    expect="E_ACTION_HASH",
    does="An approval to stop instance A is presented with the action's resource id changed "
    "to instance B (also running).",
)
def _swapped_target(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(1))
    return _swap(rig, t, "swapped-target", {"resource": resource(t, 1)})


@attack(
    "swapped_region",
    surface="executor",
    expect="E_ACTION_HASH",
    does="The approved action's region is changed to another region holding an instance "
    "with the same id.",
)
def _swapped_region(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(1), region=rig.cloud.other_region)
    raw = approved_bundle(rig, rig.hold, stop_action(t))
    action_bytes, envelope = decode_bundle(raw)
    action = json.loads(action_bytes)
    action["region"] = rig.cloud.other_region
    res = rig.present(bundle(action, envelope), "swapped-region")
    return executor_refusal(rig, res, (t.instance(0), t.instance(1)))


@attack(
    "swapped_account",
    surface="executor",
    expect="E_ACTION_HASH",
    does="The approved action's account id is changed to another account.",
)
def _swapped_account(rig: Rig, t: Target) -> Observation:
    return _swap(rig, t, "swapped-account", {"account": rig.cloud.other_account})


@attack(
    "swapped_operation",
    surface="executor",
    expect="E_ACTION_HASH",
    does="An approved stop is presented as a delete of the same instance.",
)
def _swapped_operation(rig: Rig, t: Target) -> Observation:
    return _swap(rig, t, "swapped-operation", {"operation": "delete", "params": {}})


@attack(
    "swapped_params",
    surface="executor",
    expect="E_ACTION_HASH",
    does="An approved stop is presented with other params: KeepCharging for StopCharging "
    "(Alibaba), hibernate on (AWS, whose approved EC2 stop has none).",
)
def _swapped_params(rig: Rig, t: Target) -> Observation:
    return _swap(rig, t, "swapped-params", {"params": dict(rig.cloud.other_params)})


@attack(
    "approval_for_a_with_action_b",
    surface="executor",
    expect="E_ACTION_HASH",
    does="Two real approvals, for proposals A and B: A's envelope is presented with B's "
    "action bytes.",
)
def _a_with_b(rig: Rig, t: Target) -> Observation:
    _, envelope_a = decode_bundle(approved_bundle(rig, rig.hold, stop_action(t, 0)))
    action_b, _ = decode_bundle(approved_bundle(rig, rig.hold, stop_action(t, 1)))
    res = rig.present(bundle(action_b, envelope_a), "a-with-b")
    return executor_refusal(rig, res, (t.instance(0), t.instance(1)))


@attack(
    "forged_signature",
    surface="executor",
    expect="E_SIGNATURE",
    does="A real approval's signature has one bit flipped (key id unchanged).",
)
def _forged_signature(rig: Rig, t: Target) -> Observation:
    action_bytes, envelope = decode_bundle(approved_bundle(rig, rig.hold, stop_action(t)))
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[7] ^= 0x01
    envelope["signatures"] = [
        {**envelope["signatures"][0], "sig": base64.b64encode(bytes(sig)).decode()}
    ]
    res = rig.present(bundle(action_bytes, envelope), "forged-signature")
    return executor_refusal(rig, res, (t.instance(0),))


@attack(
    "statement_retargeted_keeps_signature",
    surface="executor",
    expect="E_SIGNATURE",
    does="The signed statement and the action are both rewritten to name instance B (hashes "
    "consistent), keeping the original signature.",
)
def _retargeted_statement(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(1))
    action_bytes, envelope = decode_bundle(approved_bundle(rig, rig.hold, stop_action(t)))
    action = json.loads(action_bytes)
    action["resource"]["id"] = t.instance(1)
    new_action = canonical_bytes(action)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["resource"]["id"] = t.instance(1)
    statement["action_hash"] = action_hash(new_action)
    envelope["payload"] = base64.b64encode(canonical_bytes(statement)).decode()
    res = rig.present(bundle(new_action, envelope), "retargeted-statement")
    return executor_refusal(rig, res, (t.instance(0), t.instance(1)))


@attack(
    "key_not_in_trusted_set",
    surface="executor",
    expect="E_UNKNOWN_KEY",
    does="The attacker signs a well-formed statement for instance B with their own Ed25519 "
    "key (RFC 8032 test key 2), audience and binding all correct.",
)
def _unknown_key(rig: Rig, t: Target) -> Observation:
    record = approved(rig, rig.hold, stop_action(t))
    rig.instance(t.instance(1))
    action = json.loads(record["action_jcs"])
    action["resource"]["id"] = t.instance(1)
    action["proposal_id"] = t.proposal(1)
    statement = json.loads(base64.b64decode(record["approval"]["envelope"]["payload"]))
    statement.update(
        {
            "approval_id": "apv_" + secrets.token_hex(16),
            "proposal_id": t.proposal(1),
            "nonce": secrets.token_hex(16),
            "resource": resource(t, 1),
        }
    )
    statement["action_hash"] = action_hash(canonical_bytes(action))
    envelope = factory.sign_value(statement, "rfc8032-test2").to_value()
    res = rig.present(bundle(action, envelope), "unknown-key")
    return executor_refusal(rig, res, (t.instance(0), t.instance(1)))


@attack(
    "payload_type_swapped",
    surface="executor",
    expect="E_ENVELOPE",
    does="A real approval envelope is relabelled with the executor receipt payload type.",
)
def _payload_type(rig: Rig, t: Target) -> Observation:
    action_bytes, envelope = decode_bundle(approved_bundle(rig, rig.hold, stop_action(t)))
    assert envelope["payloadType"] == APPROVAL_PAYLOAD_TYPE
    envelope["payloadType"] = "application/vnd.airlock.receipt.v1+json"
    res = rig.present(bundle(action_bytes, envelope), "payload-type")
    return executor_refusal(rig, res, (t.instance(0),))


@attack(
    "wrong_audience_staging_approval",
    surface="executor",
    expect="E_AUDIENCE",
    does="An approval issued by the staging checkpoint (audience airlock-executor/staging, "
    "same trusted key) is shown to the production executor.",
)
def _wrong_audience(rig: Rig, t: Target) -> Observation:
    res = rig.present(approved_bundle(rig, rig.staging, stop_action(t)), "wrong-audience")
    return executor_refusal(rig, res, (t.instance(0),))


@attack(
    "duplicate_key_smuggling_in_bundle",
    surface="executor",
    expect="E_PARSE",
    does='A bundle carries two "action" members: the approved action first, a delete of '
    "instance B last (a last-wins parser would run B).",
)
def _duplicate_key_bundle(rig: Rig, t: Target) -> Observation:
    rig.instance(t.instance(1))
    raw = approved_bundle(rig, rig.hold, stop_action(t))
    action_bytes, envelope = decode_bundle(raw)
    evil = stop_action(t, 1, operation="delete", params={})
    good_b64 = base64.b64encode(action_bytes).decode()
    evil_b64 = base64.b64encode(canonical_bytes(evil)).decode()
    envelope_text = json.dumps(envelope, separators=(",", ":"))
    smuggled = f'{{"action":"{good_b64}","envelope":{envelope_text},"action":"{evil_b64}"}}'
    smuggled_bytes = smuggled.encode()
    res = rig.present(smuggled_bytes, "duplicate-key")
    return executor_refusal(rig, res, (t.instance(0), t.instance(1)))


@attack(
    "non_nfc_resource_id_in_bundle",
    surface="executor",
    expect="E_ACTION_HASH",
    does="The approved action is presented with a decomposed e + U+0301 appended to the resource "
    "id (not NFC); the executor must hash the bytes as received, never normalise.",
)
def _non_nfc_bundle(rig: Rig, t: Target) -> Observation:
    action_bytes, envelope = decode_bundle(approved_bundle(rig, rig.hold, stop_action(t)))
    action = json.loads(action_bytes)
    # "e" + U+0301 COMBINING ACUTE: NFC would compose it to U+00E9.
    action["resource"]["id"] = t.instance(0) + "e\u0301"
    res = rig.present(bundle(action, envelope), "non-nfc")
    return executor_refusal(rig, res, (t.instance(0),))


@attack(
    "homoglyph_resource_id_in_bundle",
    surface="executor",
    expect="E_ACTION_HASH",
    does="The approved action is presented with the resource id's Latin 'i' replaced by "
    "Cyrillic U+0456.",
)
def _homoglyph_bundle(rig: Rig, t: Target) -> Observation:
    action_bytes, envelope = decode_bundle(approved_bundle(rig, rig.hold, stop_action(t)))
    action = json.loads(action_bytes)
    action["resource"]["id"] = "\u0456" + t.instance(0)[1:]
    res = rig.present(bundle(action, envelope), "homoglyph")
    return executor_refusal(rig, res, (t.instance(0),))


@attack(
    "oversize_bundle",
    surface="executor",
    expect="E_SIZE",
    does="A real approved bundle padded with 70 KiB of JSON whitespace (over the 64 KiB cap).",
)
def _oversize_bundle(rig: Rig, t: Target) -> Observation:
    raw = approved_bundle(rig, rig.hold, stop_action(t))
    res = rig.present(raw[:-1] + b" " * (70 * 1024) + raw[-1:], "oversize")
    return executor_refusal(rig, res, (t.instance(0),))
