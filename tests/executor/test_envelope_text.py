"""The receipt text the ledger stores is RFC 8785 of the envelope, whichever way it is made."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airlock.protocol import RECEIPT_PAYLOAD_TYPE, Envelope, Signature, canonical_bytes
from services.executor.receipts import RECEIPT_TYPE, AuditHead, Receipt, ReceiptSigner
from services.executor.record import envelope_text


def _receipt(detail: str) -> Receipt:
    return Receipt(
        type=RECEIPT_TYPE,
        executor="airlock-executor/test",
        approval_id="apv_1",
        action_hash="sha256:" + "ab" * 32,
        outcome="succeeded",
        verified=False,
        refusal_code=None,
        cloud_request_id="req-1",
        resolution=None,
        at=1764400010,
        audit_head=AuditHead(seq=7, hash="cd" * 32),
        detail=detail,
    )


@pytest.mark.parametrize("detail", ["ecs.StopInstance accepted", 'a "quoted" \\ é\n', ""])
def test_a_signed_receipts_text_is_its_canonical_json(detail: str) -> None:
    signer = ReceiptSigner(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
    envelope = signer.sign(_receipt(detail))
    text = envelope_text(envelope)
    assert text.encode("utf-8") == canonical_bytes(envelope.to_value())
    assert json.loads(text)["signatures"][0]["keyid"] == signer.keyid


@pytest.mark.parametrize(
    "envelope",
    [
        # A key id that needs escaping, two signatures, another payload type: never the
        # receipt's fixed form, each still written canonically.
        Envelope(RECEIPT_PAYLOAD_TYPE, b"{}", (Signature('k"\\\u2028', b"s"),)),
        Envelope(RECEIPT_PAYLOAD_TYPE, b"{}", (Signature("a", b"1"), Signature("b", b"2"))),
        Envelope("application/other", b"{}", (Signature("ed25519:" + "0" * 32, b"s"),)),
    ],
)
def test_any_other_envelopes_text_is_its_canonical_json(envelope: Envelope) -> None:
    assert envelope_text(envelope).encode("utf-8") == canonical_bytes(envelope.to_value())
