"""Byte-level mutations of honest inputs, for property tests that hold a fast path to the
strict path it bypasses (tests/protocol/test_*_plain.py, test_canonical_split.py)."""

from __future__ import annotations

from hypothesis import strategies as st


def mutate(data: st.DataObject, honest: bytes, alphabet: bytes, *, copy_span: int = 0) -> bytes:
    """One to three edits of ``honest``: set, insert or delete a byte drawn from
    ``alphabet`` or, when ``copy_span`` is set, re-insert a slice of up to that many bytes
    elsewhere (which duplicates keys and members)."""
    raw = bytearray(honest)
    kinds = ["set", "insert", "delete"] + (["copy"] if copy_span else [])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        kind = data.draw(st.sampled_from(kinds))
        if kind == "copy":
            start = data.draw(st.integers(0, len(raw) - 1))
            raw[at:at] = raw[start : start + data.draw(st.integers(1, copy_span))]
            continue
        byte = data.draw(st.sampled_from(list(alphabet)))
        if kind == "set":
            raw[at] = byte
        elif kind == "insert":
            raw.insert(at, byte)
        else:
            del raw[at]
    return bytes(raw)
