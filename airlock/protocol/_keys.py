"""Key ids and the trusted public key set the executor verifies against.

A key id is ``"ed25519:" + first 32 hex of SHA-256(raw public key)`` — derived, never
chosen, so a key set entry whose kid does not match its key is refused at load. This
module holds public keys only; nothing in the kernel ever holds a private key.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ._b64 import b64decode_strict, b64encode
from ._json import loads_strict
from .errors import KeySetError, Refused

__all__ = ["KEYSET_MAX_BYTES", "KeySet", "KeyStatus", "TrustedKey", "key_id"]

KEYSET_MAX_BYTES = 1024 * 1024
_ED25519_PUBLIC_KEY_LEN = 32


def key_id(raw_public_key: bytes) -> str:
    """``ed25519:`` + the first 32 hex characters of SHA-256 of the raw 32-byte key."""
    if len(raw_public_key) != _ED25519_PUBLIC_KEY_LEN:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return "ed25519:" + hashlib.sha256(raw_public_key).hexdigest()[:32]


class KeyStatus(enum.StrEnum):
    ACTIVE = "active"  # signs new approvals
    # Staged by ``airlock keys stage``: the checkpoint signs nothing with it yet, but
    # verifiers trust it like an active key, so that when ``keys rotate`` makes it active
    # every executor that was given the key set since verifies its first approval.
    NEXT = "next"
    RETIRED = "retired"  # signs nothing new; still verifies approvals in flight
    REVOKED = "revoked"  # verifies nothing


@dataclass(frozen=True, slots=True)
class TrustedKey:
    kid: str
    raw: bytes
    status: KeyStatus
    not_after: int | None
    public_key: Ed25519PublicKey

    @classmethod
    def from_raw(
        cls, raw: bytes, status: KeyStatus = KeyStatus.ACTIVE, not_after: int | None = None
    ) -> TrustedKey:
        return cls(key_id(raw), raw, status, not_after, Ed25519PublicKey.from_public_bytes(raw))

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "kid": self.kid,
            "public_key": b64encode(self.raw),
            "status": self.status.value,
        }
        if self.not_after is not None:
            value["not_after"] = self.not_after
        return value


class KeySet(Mapping[str, TrustedKey]):
    """An immutable set of trusted public keys, indexed by key id."""

    __slots__ = ("_keys",)

    def __init__(self, keys: list[TrustedKey] | tuple[TrustedKey, ...] = ()) -> None:
        index: dict[str, TrustedKey] = {}
        for key in keys:
            if key.kid in index:
                raise KeySetError(f"key {key.kid} appears twice")
            index[key.kid] = key
        self._keys = index

    def __getitem__(self, kid: str) -> TrustedKey:
        return self._keys[kid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def to_value(self) -> dict[str, Any]:
        return {"keys": [key.to_value() for key in self._keys.values()]}

    @classmethod
    def from_value(cls, value: Any) -> KeySet:
        if (
            not isinstance(value, dict)
            or set(value) != {"keys"}
            or not isinstance(value["keys"], list)
        ):
            raise KeySetError('a key set is {"keys": [...]}')
        keys: list[TrustedKey] = []
        for n, entry in enumerate(value["keys"]):
            if not isinstance(entry, dict) or not {"kid", "public_key", "status"} <= set(entry) <= {
                "kid",
                "public_key",
                "status",
                "not_after",
            }:
                raise KeySetError(
                    f"keys[{n}]: needs kid, public_key, status (and optional not_after)"
                )
            try:
                raw = b64decode_strict(entry["public_key"])
                status = KeyStatus(entry["status"])
                not_after = entry.get("not_after")
                if not_after is not None and (
                    not isinstance(not_after, int) or isinstance(not_after, bool) or not_after < 0
                ):
                    raise ValueError("not_after must be Unix seconds")
                key = TrustedKey.from_raw(raw, status, not_after)
            except ValueError as exc:
                raise KeySetError(f"keys[{n}]: {exc}") from None
            if key.kid != entry["kid"]:
                raise KeySetError(f"keys[{n}]: kid {entry['kid']!r} does not match its key")
            keys.append(key)
        if not keys:
            # An empty trust root would refuse everything silently; say so at load time.
            raise KeySetError("a key set with no keys trusts nothing")
        return cls(keys)

    @classmethod
    def from_json_bytes(cls, data: bytes) -> KeySet:
        try:
            value = loads_strict(data, max_bytes=KEYSET_MAX_BYTES)
        except Refused as exc:
            raise KeySetError(f"key set is not strict JSON: {exc.detail}") from None
        return cls.from_value(value)
