"""Strict base64 for wire fields. Not public."""

from __future__ import annotations

import base64
import binascii

__all__ = ["b64decode_strict", "b64encode"]


def b64decode_strict(text: object) -> bytes:
    """Standard base64 with padding; no whitespace, no URL-safe alphabet, nothing ignored."""
    if type(text) is not str:  # a subclass could override what is decoded
        raise ValueError("not base64 text")
    try:
        # strict_mode (3.11+): only the alphabet, correct padding, nothing after it. A str
        # with any non-ASCII character is refused (ValueError) before decoding.
        data = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        raise ValueError("invalid base64") from None
    # strict_mode still accepts non-zero padding bits in the last quantum, so two texts
    # could decode to the same bytes; re-encoding that quantum makes the text unique.
    tail = len(data) % 3
    if tail and binascii.b2a_base64(data[-tail:], newline=False).decode("ascii") != text[-4:]:
        raise ValueError("non-canonical base64")
    return data


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
