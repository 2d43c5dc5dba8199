"""airlock.protocol.verify_receipt: the receipt statement and its check, apart from any
service (docs/protocol.md#receipts). Signed here with a key of the test's own, as any
key holder (the executor, an embedded gate) signs one."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from airlock.protocol import (
    APPROVAL_PAYLOAD_TYPE,
    RECEIPT_PAYLOAD_TYPE,
    Envelope,
    InvalidReceipt,
    KeySet,
    Receipt,
    Signature,
    TrustedKey,
    canonical_bytes,
    key_id,
    pae,
    verify_receipt,
)

_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
_RAW = _KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
_KEYS = KeySet([TrustedKey.from_raw(_RAW)])
_NOW = 1_764_400_000


def _payload(**changes: Any) -> dict[str, Any]:
    return {
        "type": "airlock.receipt/v1",
        "executor": "airlock-executor/test",
        "approval_id": "apv_receipt0001",
        "action_hash": "sha256:" + "ab" * 32,
        "outcome": "succeeded",
        "verified": True,
        "refusal_code": None,
        "cloud_request_id": "req-1",
        "resolution": None,
        "at": _NOW,
        "audit_head": {"seq": 7, "hash": "cd" * 32},
        "detail": "stopped",
        **changes,
    }


def _signed(payload: bytes, payload_type: str = RECEIPT_PAYLOAD_TYPE) -> dict[str, Any]:
    sig = _KEY.sign(pae(payload_type, payload))
    return Envelope(payload_type, payload, (Signature(key_id(_RAW), sig),)).to_value()


def test_a_signed_receipt_verifies_from_bytes_and_from_a_parsed_value() -> None:
    payload = canonical_bytes(_payload())
    envelope = _signed(payload)
    from_value = verify_receipt(envelope, _KEYS, _NOW)
    from_bytes = verify_receipt(json.dumps(envelope).encode(), _KEYS, _NOW)
    assert from_value == from_bytes
    assert from_value.receipt == Receipt.model_validate(_payload())
    assert (from_value.keyid, from_value.payload) == (key_id(_RAW), payload)
    assert from_value.receipt.canonical_bytes() == payload


def test_a_tampered_receipt_is_refused() -> None:
    envelope = _signed(canonical_bytes(_payload()))
    envelope["payload"] = base64.b64encode(canonical_bytes(_payload(outcome="failed"))).decode()
    with pytest.raises(InvalidReceipt, match="E_SIGNATURE"):
        verify_receipt(envelope, _KEYS, _NOW)


def test_an_approval_envelope_passed_off_as_a_receipt_is_refused() -> None:
    envelope = _signed(canonical_bytes(_payload()), APPROVAL_PAYLOAD_TYPE)
    with pytest.raises(InvalidReceipt, match="E_ENVELOPE"):
        verify_receipt(envelope, _KEYS, _NOW)


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        (_payload(extra="field"), "extra"),
        ({k: v for k, v in _payload().items() if k != "executor"}, "executor"),
        (_payload(outcome="maybe"), "outcome"),
        (_payload(verified=1), "verified"),
        (_payload(audit_head={"seq": -1, "hash": "x"}), "audit_head.seq"),
        (_payload(resolution={"decision": "perhaps", "by": "a", "at": 1, "note": ""}), "decision"),
    ],
)
def test_a_signed_payload_that_is_not_a_receipt_is_refused(
    payload: dict[str, Any], where: str
) -> None:
    with pytest.raises(InvalidReceipt, match=f"not a receipt/v1: .*{where}"):
        verify_receipt(_signed(canonical_bytes(payload)), _KEYS, _NOW)


def test_a_duplicate_key_in_a_signed_payload_is_refused() -> None:
    text = canonical_bytes(_payload()).replace(
        b'"outcome":"succeeded"', b'"outcome":"failed","outcome":"succeeded"'
    )
    with pytest.raises(InvalidReceipt, match="E_PARSE"):
        verify_receipt(_signed(text), _KEYS, _NOW)
