"""Strict JSON for everything that is hashed or signed (DESIGN §2.1).

Python's ``json.loads`` keeps the last of duplicate keys, accepts ``NaN`` and
``Infinity``, lets lone surrogates through ``\\uD800`` escapes and guesses UTF-16 from
bytes. Each of those is a way to make two parsers disagree about what was signed, so
this module refuses all of them. Not public: use :func:`airlock.protocol.loads_strict`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

import rfc8785

from .errors import RefusalCode, Refused

__all__ = [
    "MAX_SAFE_INTEGER",
    "canonical_bytes",
    "check_no_floats",
    "check_tree",
    "loads_strict",
]

#: RFC 8785 §3.2.2.3 / I-JSON (RFC 7493 §2.2): integers must be exactly representable
#: as IEEE 754 doubles; we require |n| < 2^53.
MAX_SAFE_INTEGER = 2**53 - 1
_MAX_DEPTH = 32
_UTF8_BOM = b"\xef\xbb\xbf"
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Reject(ValueError):
    """Raised inside json hooks; converted to Refused(E_PARSE) at the boundary."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Reject(f"duplicate key {key!r}")
            seen.add(key)
    return obj


def _constant(name: str) -> Any:
    raise _Reject(f"{name} is not JSON")


def _float(text: str) -> Any:
    raise _Reject(f"non-integer number {text!r}: signed objects carry no floats")


def _int(text: str) -> int:
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise _Reject(f"integer {text} outside ±(2^53 - 1)")
    return value


def _check_tree(value: Any, depth: int, nfc: bool) -> None:
    if depth > _MAX_DEPTH:
        raise _Reject(f"nesting deeper than {_MAX_DEPTH}")
    if isinstance(value, str):
        _check_str(value, nfc)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_str(key, nfc)
            _check_tree(item, depth + 1, nfc)
    elif isinstance(value, list):
        for item in value:
            _check_tree(item, depth + 1, nfc)


def check_tree(value: Any, *, nfc: bool) -> None:
    """Raise ValueError on a lone surrogate, too-deep nesting or (``nfc``) non-NFC text."""
    _check_tree(value, 0, nfc)


def _check_str(text: str, nfc: bool) -> None:
    if _SURROGATE.search(text):
        raise _Reject("lone surrogate in string")
    if nfc and not unicodedata.is_normalized("NFC", text):
        raise _Reject(f"string {text!r} is not NFC-normalised")


def loads_strict(data: bytes, *, max_bytes: int, nfc: bool = True) -> Any:
    """Parse ``data`` as strict I-JSON with no floats, or raise :class:`Refused`.

    Refuses (E_SIZE) input over ``max_bytes`` before reading it, and (E_PARSE): a BOM,
    invalid UTF-8, duplicate keys, ``NaN``/``Infinity``, floats, integers beyond ±(2^53-1),
    lone surrogates, nesting deeper than 32, trailing data and, when ``nfc`` is set,
    any string or key that is not NFC-normalised.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError("loads_strict takes bytes")
    if len(data) > max_bytes:
        raise Refused(RefusalCode.E_SIZE, f"{len(data)} bytes is over the {max_bytes}-byte cap")
    raw = bytes(data)
    if raw.startswith(_UTF8_BOM):
        raise Refused(RefusalCode.E_PARSE, "byte order mark before JSON")
    try:
        # Decode ourselves: json.loads(bytes) would sniff UTF-16/32. Python's strict
        # UTF-8 decoder also refuses encoded surrogates and overlong forms.
        text = raw.decode("utf-8", errors="strict")
        value = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_constant=_constant,
            parse_float=_float,
            parse_int=_int,
            strict=True,  # control characters inside strings are refused
        )
        _check_tree(value, 0, nfc)
    except UnicodeDecodeError as exc:
        raise Refused(RefusalCode.E_PARSE, f"invalid UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise Refused(RefusalCode.E_PARSE, "nesting too deep") from None
    except ValueError as exc:  # json.JSONDecodeError, _Reject, int() digit limits
        raise Refused(RefusalCode.E_PARSE, str(exc)) from None
    return value


def check_no_floats(value: Any, depth: int = 0) -> None:
    """Raise ValueError if ``value`` holds a float or an integer beyond ±(2^53-1) (§2.1)."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"nesting deeper than {_MAX_DEPTH}")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise ValueError(f"integer {value} outside ±(2^53 - 1)")
        return
    if isinstance(value, float):
        raise ValueError(f"float {value!r} in a signed object: use integers or decimal strings")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"non-string key {key!r}")
            check_no_floats(item, depth + 1)
        return
    if isinstance(value, list | tuple):
        for item in value:
            check_no_floats(item, depth + 1)
        return
    raise ValueError(f"{type(value).__name__} is not a JSON value")


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical bytes of a float-free JSON value."""
    check_no_floats(value)
    return rfc8785.dumps(value)
