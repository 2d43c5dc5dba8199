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
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("invalid base64") from None
    # validate=True still accepts non-zero padding bits; re-encoding makes the text unique.
    if base64.b64encode(data).decode("ascii") != text:
        raise ValueError("non-canonical base64")
    return data


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
