"""Strict base64 for wire fields. Not public."""

from __future__ import annotations

import base64
import binascii

__all__ = ["b64decode_strict", "b64encode"]


def b64decode_strict(text: object) -> bytes:
    """Standard base64 with padding; no whitespace, no URL-safe alphabet, nothing ignored."""
    if not isinstance(text, str) or not text.isascii():
        raise ValueError("not base64 text")
    try:
        # strict_mode (3.11+): only the alphabet, correct padding, nothing after it.
        data = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, ValueError):
        raise ValueError("invalid base64") from None
    # validate=True still accepts non-zero padding bits in the last quantum, so two texts
    # could decode to the same bytes; re-encoding that quantum makes the text unique.
    tail = len(data) % 3
    if tail and base64.b64encode(data[-tail:]).decode("ascii") != text[-4:]:
        raise ValueError("non-canonical base64")
    return data


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
