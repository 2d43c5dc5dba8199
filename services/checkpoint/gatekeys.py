"""The gates' receipt key sets, one per audience (``AIRLOCK_CHECKPOINT_GATE_KEYS``).

A JSON file ``{"<audience>": <key set>, ...}``, each key set as
:meth:`airlock.protocol.KeySet.from_value` reads it. A gate's receipt for a tool call
verifies only against the set of that tool call's audience; these keys never verify a
cloud receipt, and the executor's never a tool call's (:mod:`.reports`).

The file is read again when its modification time or size changes, so a gate's key is
added without a restart. Failing closed: a file that is missing (and not required),
unreadable or invalid gives no key at all, so every gate report is refused until it is
fixed; it is never half-read. This module never holds a private key.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from airlock.protocol import (
    RECEIPT_PAYLOAD_TYPE,
    Envelope,
    InvalidReceipt,
    KeySet,
    KeySetError,
    Refused,
    VerifiedReceipt,
    loads_strict,
    verify_receipt,
)

from .errors import ConfigError

__all__ = ["GateKeys", "parse_gate_keys", "verify_gate_receipt"]

_log = logging.getLogger("airlock.checkpoint")
_AUDIENCE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_MAX_BYTES: Final = 1024 * 1024


def parse_gate_keys(data: bytes) -> dict[str, KeySet]:
    """The key sets of a gate key file, or raise ValueError naming what is wrong."""
    try:
        value = loads_strict(data, max_bytes=_MAX_BYTES)
    except Refused as exc:
        raise ValueError(f"not strict JSON: {exc.detail}") from None
    if not isinstance(value, dict):
        raise ValueError('not an object {"<audience>": <key set>, ...}')
    sets: dict[str, KeySet] = {}
    for audience, keyset in value.items():
        if not _AUDIENCE.fullmatch(audience):
            raise ValueError(f"{audience[:130]!r} is not an audience")
        try:
            sets[audience] = KeySet.from_value(keyset)
        except KeySetError as exc:
            raise ValueError(f"{audience}: {exc}") from None
    return sets


class GateKeys:
    """The gate key sets in ``path`` (none when ``path`` is None), read again on change."""

    def __init__(self, path: Path | None, *, required: bool = False) -> None:
        """Raises :class:`ConfigError` when ``required`` and the file cannot be read, or
        when it exists and is invalid: a service does not start on a bad file."""
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._sets: dict[str, KeySet] = {}
        if path is None:
            return
        if not path.exists() and not required:
            return
        try:
            self._sets, self._stamp = self._read(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"gate key set {path}: {exc}") from None

    @classmethod
    def of(cls, sets: dict[str, KeySet]) -> GateKeys:
        """Fixed key sets, never read from a file (tests, embedding)."""
        keys = cls(None)
        keys._sets = dict(sets)
        return keys

    @staticmethod
    def _read(path: Path) -> tuple[dict[str, KeySet], tuple[int, int]]:
        stat = path.stat()
        return parse_gate_keys(path.read_bytes()), (stat.st_mtime_ns, stat.st_size)

    def sets(self) -> dict[str, KeySet]:
        """Every audience's key set, as the file says now."""
        with self._lock:
            self._refresh()
            return dict(self._sets)

    def for_audience(self, audience: str) -> KeySet | None:
        """The key set registered for ``audience``, as the file says now, or None."""
        with self._lock:
            self._refresh()
            return self._sets.get(audience)

    def _refresh(self) -> None:
        if self.path is None:
            return
        try:
            stat = self.path.stat()
        except OSError:
            stamp = None
        else:
            stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        try:
            self._sets, self._stamp = self._read(self.path)
        except FileNotFoundError:
            self._sets, self._stamp = {}, None
        except (OSError, ValueError) as exc:
            # Fail closed: no gate key until the file is good again (a half-written file
            # is read again on its next change).
            _log.warning("gate key set %s: %s; every gate report is refused", self.path, exc)
            self._sets, self._stamp = {}, stamp


def verify_gate_receipt(
    keys: GateKeys, receipt: Mapping[str, Any], now: int
) -> tuple[VerifiedReceipt, str]:
    """A receipt signed by a key of the gate key set of the audience it names (its
    ``executor``): ``(the verified receipt, that audience)``, or raise ValueError.

    The audience is chosen by the signature's key id, never read from the payload
    before it is verified: each audience whose set holds that key id is tried, and
    only a receipt naming the audience whose key signed it passes.
    """
    try:
        envelope = Envelope.from_value(dict(receipt), payload_type=RECEIPT_PAYLOAD_TYPE)
    except Refused as exc:
        raise ValueError(f"{exc.code.value}: {exc.detail}") from None
    signed_by = {sig.keyid for sig in envelope.signatures}
    for audience, keyset in sorted(keys.sets().items()):
        if not signed_by & set(keyset):
            continue
        try:
            verified = verify_receipt(receipt, keyset, now)
        except InvalidReceipt:
            continue
        if verified.receipt.executor == audience:
            return verified, audience
    raise ValueError("not signed by a gate key of the audience it names")
