"""DSSE v1 envelopes (secure-systems-lab/dsse ``protocol.md``), Ed25519 only.

The signature is over ``PAE(payloadType, payload)``, so the payload type is
authenticated and there is no algorithm field to confuse. ``keyid`` is a hint that must
name a trusted key; it is never used to pick an algorithm. This module verifies only;
signing lives with the holders of private keys (``services/checkpoint/signer.py`` for
approvals, the executor for receipts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidSignature

from ._b64 import b64decode_strict, b64encode
from ._json import loads_strict
from ._keys import KeySet, KeyStatus
from .errors import RefusalCode, Refused

__all__ = ["ENVELOPE_MAX_SIGNATURES", "Envelope", "Signature", "pae", "verify_envelope"]

#: More signatures than this is refused: each one is an Ed25519 verify we would pay for.
ENVELOPE_MAX_SIGNATURES: Final = 4


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding.

    ``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` where LEN is
    the ASCII decimal byte length.
    """
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


@dataclass(frozen=True, slots=True)
class Signature:
    keyid: str
    sig: bytes


@dataclass(frozen=True, slots=True)
class Envelope:
    """A parsed DSSE envelope. Construct with :meth:`from_value` from untrusted JSON."""

    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def to_value(self) -> dict[str, Any]:
        return {
            "payloadType": self.payload_type,
            "payload": b64encode(self.payload),
            "signatures": [{"keyid": s.keyid, "sig": b64encode(s.sig)} for s in self.signatures],
        }

    @classmethod
    def from_value(cls, value: Any, *, payload_type: str) -> Envelope:
        """Check the envelope's shape and exact payload type, or raise Refused(E_ENVELOPE)."""
        if not isinstance(value, dict) or set(value) != {"payloadType", "payload", "signatures"}:
            raise Refused(
                RefusalCode.E_ENVELOPE,
                "envelope must have exactly payloadType, payload, signatures",
            )
        if value["payloadType"] != payload_type:
            raise Refused(
                RefusalCode.E_ENVELOPE,
                f"payload type {str(value['payloadType'])[:80]!r} is not {payload_type!r}",
            )
        sigs = value["signatures"]
        if not isinstance(sigs, list) or not 1 <= len(sigs) <= ENVELOPE_MAX_SIGNATURES:
            raise Refused(
                RefusalCode.E_ENVELOPE,
                f"signatures must be a list of 1 to {ENVELOPE_MAX_SIGNATURES}",
            )
        try:
            payload = b64decode_strict(value["payload"])
            parsed: list[Signature] = []
            for entry in sigs:
                if not isinstance(entry, dict) or set(entry) != {"keyid", "sig"}:
                    raise ValueError("each signature must have exactly keyid and sig")
                if not isinstance(entry["keyid"], str) or len(entry["keyid"]) > 128:
                    raise ValueError("keyid must be a short string")
                parsed.append(Signature(entry["keyid"], b64decode_strict(entry["sig"])))
        except ValueError as exc:
            raise Refused(RefusalCode.E_ENVELOPE, str(exc)) from None
        return cls(payload_type, payload, tuple(parsed))

    @classmethod
    def from_json_bytes(cls, data: bytes, *, payload_type: str, max_bytes: int) -> Envelope:
        return cls.from_value(loads_strict(data, max_bytes=max_bytes), payload_type=payload_type)


def verify_envelope(envelope: Envelope, keys: KeySet, now: int) -> str:
    """Verify at least one signature from a trusted, usable key; return its key id.

    A signature counts only from a key whose id matches its ``keyid`` and that is not
    revoked (nor past its ``not_after``). Raises Refused with E_UNKNOWN_KEY when no
    signature names a trusted key, E_KEY_REVOKED when every named key is unusable, and
    E_SIGNATURE when a usable key's signature does not verify.
    """
    message = pae(envelope.payload_type, envelope.payload)
    named_any = False
    usable_any = False
    # A truncated or overlong signature still goes through verify(): it fails there as
    # E_SIGNATURE rather than being special-cased.
    for signature in envelope.signatures:
        key = keys.get(signature.keyid)
        if key is None:
            continue
        named_any = True
        if key.status is KeyStatus.REVOKED or (key.not_after is not None and now > key.not_after):
            continue
        usable_any = True
        try:
            key.public_key.verify(signature.sig, message)
        except InvalidSignature:
            continue
        return key.kid
    if not named_any:
        raise Refused(RefusalCode.E_UNKNOWN_KEY, "no signature is from a trusted key id")
    if not usable_any:
        raise Refused(RefusalCode.E_KEY_REVOKED, "every matching key is revoked or past not_after")
    raise Refused(RefusalCode.E_SIGNATURE, "signature does not verify")
