"""Strict JSON for everything that is hashed or signed (docs/protocol.md#strict-json).

Python's ``json.loads`` keeps the last of duplicate keys, accepts ``NaN`` and
``Infinity``, lets lone surrogates through ``\\uD800`` escapes and guesses UTF-16 from
bytes. Each of those is a way to make two parsers disagree about what was signed, so
this module refuses all of them. Not public: use :func:`airlock.protocol.loads_strict`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any, Final

import rfc8785

from .errors import RefusalCode, Refused

__all__ = [
    "MAX_SAFE_INTEGER",
    "PARSED_STRICTLY",
    "canonical_bytes",
    "check_no_floats",
    "check_tree",
    "loads_strict",
    "plain_text",
]

#: RFC 8785 §3.2.2.3 / I-JSON (RFC 7493 §2.2): integers must be exactly representable
#: as IEEE 754 doubles; we require |n| < 2^53.
MAX_SAFE_INTEGER = 2**53 - 1
_MAX_DEPTH = 32
_UTF8_BOM = b"\xef\xbb\xbf"
_CONTAINERS = (dict, list)
_SURROGATE = re.compile("[\ud800-\udfff]")
# A \u escape that could hide a lone surrogate or a non-NFC sequence the raw text does not
# show: one that produces a non-ASCII code point, or an ASCII one followed by a non-ASCII
# character it could combine with ("\u0065" then U+0301 is a decomposed "é" while the
# text shows "5" then U+0301). RFC 8785 output only escapes control characters
# (\u0000-\u001f), so canonical input never takes the slow path for this.
_HIDING_ESCAPE = re.compile(r"\\u(?!00[0-7][0-9a-fA-F])|\\u[0-9a-fA-F]{4}[^\x00-\x7f]")

#: Validation context proving a value came out of :func:`loads_strict` (floats, surrogates
#: and, with nfc, non-NFC text already refused), so models need not walk it again. A
#: private object, so no caller can claim it by accident.
PARSED_STRICTLY: Final[dict[object, bool]] = {object(): True}


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
    # 2^53 - 1 has 16 digits: anything shorter (a sign included) is in range, and most
    # numbers are short, so they skip the comparison.
    if len(text) < 16:
        return int(text)
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise _Reject(f"integer {text} outside ±(2^53 - 1)")
    return value


# Built once: json.loads with hooks would build a decoder and scanner on every call.
_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_pairs,
    parse_constant=_constant,
    parse_int=_int,
    parse_float=_float,
    strict=True,  # control characters inside strings are refused
)
#: The decoder's C scanner: one value from an index, no whitespace skipping around it.
_SCAN_ONCE: Final = _DECODER.scan_once  # type: ignore[attr-defined]


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


def _check_depth(value: Any) -> None:
    # Iterative, over containers only: strings and numbers are not visited.
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise _Reject(f"nesting deeper than {_MAX_DEPTH}")
        items = node.values() if type(node) is dict else node
        stack.extend((item, depth + 1) for item in items if type(item) in _CONTAINERS)


def _check_parsed(text: str, value: Any, nfc: bool) -> None:
    # Fewer than _MAX_DEPTH brackets in the whole text cannot nest deeper than that.
    if text.count("[") + text.count("{") > _MAX_DEPTH:
        _check_depth(value)
    # Without an escape that could hide a code point, every string is a verbatim slice of
    # the text between two '"', and '"' is a stable code point (UAX #15: a starter that
    # never composes), so the text is NFC exactly when every string in it is. Surrogates
    # cannot come from valid UTF-8.
    if _HIDING_ESCAPE.search(text) is None and (not nfc or unicodedata.is_normalized("NFC", text)):
        return
    _check_tree(value, 0, nfc)


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
        # The scanner alone where the text is one value with no whitespace around it, as
        # canonical JSON is; otherwise the full decoder, which skips whitespace around the
        # value and gives the standard error for no value or trailing data.
        try:
            value, end = _SCAN_ONCE(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):
            value = _DECODER.decode(text)
        _check_parsed(text, value, nfc)
    except UnicodeDecodeError as exc:
        raise Refused(RefusalCode.E_PARSE, f"invalid UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise Refused(RefusalCode.E_PARSE, "nesting too deep") from None
    except ValueError as exc:  # json.JSONDecodeError, _Reject, int() digit limits
        raise Refused(RefusalCode.E_PARSE, str(exc)) from None
    return value


_PRINTABLE_ASCII: Final = bytes(range(0x20, 0x7F))


def plain_text(data: bytes, *, max_bytes: int) -> str | None:
    """``data`` as text if it is bytes of at most ``max_bytes``, printable ASCII with no
    backslash, else None. In such a text there are no escapes and no control characters,
    every string is NFC and verbatim, and every '"' delimits a string: the precondition
    of the one-pass parses of a statement and an action."""
    if type(data) is not bytes or len(data) > max_bytes:  # bytearray, memoryview: strict
        return None
    # Printable ASCII is 0x20-0x7E: what str.isprintable() accepts of ASCII, checked on
    # the bytes in one pass (deleting those; anything left is not plain).
    if data.translate(None, _PRINTABLE_ASCII) or b"\\" in data:
        return None
    return data.decode("ascii")


def check_no_floats(value: Any, depth: int = 0) -> None:
    """Raise ValueError if ``value`` holds a float or an integer beyond ±(2^53-1)."""
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


# For a float-free value, RFC 8785 and the json module's C encoder with these settings
# write the same bytes: the same escapes (\" \\ \b \f \n \r \t, other C0 controls as
# lowercase \u00xx, nothing else), integers as plain decimals, no whitespace. They differ
# only in member order, RFC 8785 sorting keys by UTF-16 code units and sort_keys by code
# points, which agree for ASCII keys. tests/protocol/test_json.py checks the two against
# each other on generated values.
_JCS_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False,
    allow_nan=False,
    sort_keys=True,
    separators=(",", ":"),
    check_circular=False,  # _plain_ascii_keys bounds the depth first
)


def _plain_ascii_keys(value: Any, depth: int) -> bool:
    """True if ``value`` is built of exact JSON types only, with ASCII keys, safe integers
    and nesting within the limit: the values the C encoder writes as RFC 8785 does."""
    if depth > _MAX_DEPTH:  # as check_no_floats counts it
        return False
    kind = type(value)
    if kind is dict:
        if depth == _MAX_DEPTH and value:  # its members would nest deeper than the limit
            return False
        for key, item in value.items():
            if type(key) is not str or not key.isascii():
                return False
            # The scalars inline: an event or a receipt is mostly scalars, and a call
            # per member was most of this walk's time.
            item_kind = type(item)
            if item_kind is str or item_kind is bool or item is None:
                continue
            if item_kind is int:
                if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                    continue
                return False
            if not _plain_ascii_keys(item, depth + 1):
                return False
        return True
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER)
    if kind is list or kind is tuple:
        return all(_plain_ascii_keys(item, depth + 1) for item in value)
    return False


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical bytes of a float-free JSON value.

    Values of exact JSON types with ASCII keys (all of Airlock's own records) go through
    the json module's C encoder; anything else, and every refusal, through ``rfc8785``.
    """
    if _plain_ascii_keys(value, 0):
        try:
            return _JCS_ENCODER.encode(value).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 below refuses it
    check_no_floats(value)
    return rfc8785.dumps(value)
