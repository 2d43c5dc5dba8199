"""The executor's receipt, v1 (docs/protocol.md#receipts): what an executor signs about
what it did with one bundle.

A receipt is a DSSE envelope of payload type ``application/vnd.airlock.receipt.v1+json``
over the RFC 8785 bytes of a :class:`Receipt`, signed with the executor's own receipt
key (never the approval key). This module defines the statement and verifies an
envelope against trusted receipt keys; signing stays with the key holder (the executor).
Pure: no I/O, no clock read, no private key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._dsse import Envelope, verify_envelope
from ._json import canonical_bytes, loads_strict
from ._keys import KeySet
from .errors import InvalidReceipt, Refused

__all__ = [
    "RECEIPT_MAX_BYTES",
    "RECEIPT_PAYLOAD_TYPE",
    "RECEIPT_TYPE",
    "AuditHead",
    "Receipt",
    "ReceiptOutcome",
    "Resolution",
    "VerifiedReceipt",
    "verify_receipt",
]

RECEIPT_TYPE: Final = "airlock.receipt/v1"
RECEIPT_PAYLOAD_TYPE: Final = "application/vnd.airlock.receipt.v1+json"
#: docs/protocol.md#strict-json: a receipt (envelope or payload) is at most 64 KiB.
RECEIPT_MAX_BYTES: Final = 64 * 1024

ReceiptOutcome = Literal["succeeded", "failed", "in_doubt", "refused", "resolved"]


class _Wire(BaseModel):
    # Not WireModel: the executor builds one per outcome on its hot path, and a model it
    # built itself needs no revalidation.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class AuditHead(_Wire):
    """The executor audit chain's last row when the receipt was made."""

    seq: Annotated[int, Field(ge=0)]
    hash: Annotated[str, Field(min_length=1, max_length=100)]


class Resolution(_Wire):
    """A person's decision on an in_doubt row, recorded in the executor's ledger."""

    decision: Literal["happened", "did_not_happen"]
    by: Annotated[str, Field(min_length=1, max_length=128)]
    at: Annotated[int, Field(ge=0)]
    note: Annotated[str, Field(max_length=2000)]


class Receipt(_Wire):
    """``airlock.receipt/v1``: one terminal outcome of one bundle (docs/protocol.md#receipts)."""

    type: Literal["airlock.receipt/v1"]
    executor: str  # the executor's audience
    approval_id: str | None  # None when the bundle was refused before its statement parsed
    action_hash: str | None
    outcome: ReceiptOutcome
    verified: bool  # succeeded because live state showed the effect, not the call's answer
    refusal_code: str | None
    cloud_request_id: str | None
    resolution: Resolution | None
    at: Annotated[int, Field(ge=0)]
    audit_head: AuditHead
    detail: Annotated[str, Field(max_length=2000)]

    def canonical_bytes(self) -> bytes:
        """RFC 8785 bytes: the DSSE payload."""
        return canonical_bytes(self.model_dump(mode="json"))

    @classmethod
    def from_json_bytes(cls, payload: bytes) -> Receipt:
        """Strictly parse a receipt payload (not its signature), or raise
        :class:`InvalidReceipt`."""
        try:
            value = loads_strict(payload, max_bytes=RECEIPT_MAX_BYTES)
        except Refused as exc:
            raise InvalidReceipt(f"{exc.code.value}: {exc.detail}") from None
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "receipt"
            raise InvalidReceipt(f"not a receipt/v1: {where}: {err['msg']}") from None


class VerifiedReceipt(NamedTuple):
    """A receipt whose signature verified: only :func:`verify_receipt` builds one."""

    receipt: Receipt
    #: The key id of the receipt key whose signature verified.
    keyid: str
    #: The payload exactly as signed (hash it to name the receipt).
    payload: bytes


def verify_receipt(envelope: bytes | Mapping[str, Any], keys: KeySet, now: int) -> VerifiedReceipt:
    """Verify a receipt envelope against trusted receipt keys, then parse its payload.

    Args:
        envelope: the DSSE envelope as JSON bytes, or as the value a strict parser made
            of them (a request body's ``receipt``).
        keys: the executor receipt keys this verifier trusts.
        now: Unix seconds, for the keys' ``not_after``.

    Raises:
        InvalidReceipt: the envelope is malformed, of another payload type, not signed
            by a trusted usable key, or its payload is not an ``airlock.receipt/v1``.
    """
    try:
        if isinstance(envelope, bytes | bytearray | memoryview):
            parsed = Envelope.from_json_bytes(
                bytes(envelope), payload_type=RECEIPT_PAYLOAD_TYPE, max_bytes=RECEIPT_MAX_BYTES
            )
        else:
            parsed = Envelope.from_value(dict(envelope), payload_type=RECEIPT_PAYLOAD_TYPE)
        keyid = verify_envelope(parsed, keys, now)
    except Refused as exc:
        raise InvalidReceipt(f"{exc.code.value}: {exc.detail}") from None
    return VerifiedReceipt(Receipt.from_json_bytes(parsed.payload), keyid, parsed.payload)
