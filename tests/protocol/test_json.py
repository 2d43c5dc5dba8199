"""Strict JSON: every ambiguity two parsers could disagree on is refused.

The rules are docs/protocol.md#strict-json.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlock.protocol import (
    MAX_SAFE_INTEGER,
    ProposedAction,
    RefusalCode,
    Refused,
    canonical_bytes,
    loads_strict,
)
from devstack import factory

CAP = 1024


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b'{"a": 1, "a": 2}', "duplicate key"),
        (b'{"a": {"b": 1, "b": 1}}', "duplicate key"),
        (b"[NaN]", "NaN"),
        (b"[Infinity]", "Infinity"),
        (b"[-Infinity]", "Infinity"),
        (b"\xef\xbb\xbf{}", "byte order mark"),
        (b'{"a": "\xff"}', "UTF-8"),
        (b'{"a": "\xed\xa0\x80"}', "UTF-8"),  # an encoded surrogate
        (b'{"a": "\\ud800"}', "surrogate"),
        (b'{"\\udfff": 1}', "surrogate"),
        # An ASCII escape then a raw combining mark: a decomposed "\u00e9" the text hides.
        (b'["\\u0065\xcc\x81"]', "NFC"),
        (b'{"\\u0065\xcc\x81": 1}', "NFC"),
        (b"{} {}", "Extra data"),
        (b'{"a": 1}x', "Extra data"),
        (b"[1.0]", "float"),
        (b"[1e3]", "float"),
        (b"[9007199254740992]", "2^53"),
        (b"[-9007199254740992]", "2^53"),
        (b'"e\\u0301"', "NFC"),
        (b'{"a": "\x01"}', "control"),
        (b"[" * 40 + b"]" * 40, "nesting"),
        (b"", "Expecting value"),
        (b"\xff\xfe{\x00}\x00", "UTF-8"),  # UTF-16 that json.loads(bytes) would sniff
    ],
)
def test_ambiguous_json_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(Refused) as err:
        loads_strict(raw, max_bytes=CAP)
    assert err.value.code is RefusalCode.E_PARSE
    assert why.lower() in err.value.detail.lower()


def test_oversize_is_refused_before_parsing() -> None:
    with pytest.raises(Refused) as err:
        loads_strict(b"[" + b"1," * CAP + b"1]", max_bytes=CAP)
    assert err.value.code is RefusalCode.E_SIZE


def test_integers_at_the_safe_limit_are_accepted() -> None:
    assert loads_strict(b"[9007199254740991, -9007199254740991]", max_bytes=CAP) == [
        MAX_SAFE_INTEGER,
        -MAX_SAFE_INTEGER,
    ]


def test_canonical_bytes_refuse_floats() -> None:
    with pytest.raises(ValueError, match="float"):
        canonical_bytes({"cpu": 3.4})


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs"))),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@settings(max_examples=200)
@given(value=json_values, seed=st.integers(0, 2**32), indent=st.sampled_from([None, 0, 2, "\t"]))
def test_key_order_and_whitespace_never_change_canonical_bytes(
    value: Any, seed: int, indent: int | str | None
) -> None:
    import unicodedata

    # NFC is a separate rule, checked elsewhere; keep this property about layout only.
    value = json.loads(
        unicodedata.normalize("NFC", json.dumps(value, ensure_ascii=False)),
    )
    text = json.dumps(_shuffled(value, random.Random(seed)), indent=indent, ensure_ascii=seed % 2)
    reparsed = loads_strict(text.encode(), max_bytes=1 << 20)
    assert canonical_bytes(reparsed) == canonical_bytes(value)


@settings(max_examples=100)
@given(seed=st.integers(0, 2**32), indent=st.sampled_from([None, 1, 4]))
def test_key_order_and_whitespace_never_change_the_action_hash(
    seed: int, indent: int | None
) -> None:
    action = factory.action_value()
    expected = ProposedAction.model_validate(action).action_hash()
    text = json.dumps(_shuffled(action, random.Random(seed)), indent=indent, ensure_ascii=seed % 2)
    assert ProposedAction.from_json_bytes(text.encode()).action_hash() == expected


# canonical_bytes takes the json module's C encoder for plain values with ASCII keys and
# rfc8785 for everything else: the two must never differ, and both must refuse alike.
_any_text = st.text(st.characters(codec="utf-8"), max_size=12) | st.text(
    st.characters(min_codepoint=0, max_codepoint=0xFFFF), max_size=12
)
_keys = st.text(st.characters(max_codepoint=0x7F), max_size=6) | _any_text
_ints = st.integers(-(2**53) - 2, 2**53 + 2) | st.integers(-100, 100)
_scalars = st.none() | st.booleans() | _ints | _any_text
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_keys, inner, max_size=4)
    ),
    max_leaves=20,
)


def _reference(value: Any) -> bytes | type[Exception]:
    import rfc8785

    from airlock.protocol._json import check_no_floats

    try:
        check_no_floats(value)
        return rfc8785.dumps(value)
    except ValueError:
        return ValueError


def _ours(value: Any) -> bytes | type[Exception]:
    try:
        return canonical_bytes(value)
    except ValueError:
        return ValueError


@settings(max_examples=1500, deadline=None)
@given(value=_values)
def test_canonical_bytes_are_rfc8785_byte_for_byte(value: Any) -> None:
    assert _ours(value) == _reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"e": 1, "\u00e9": 2, "\U0001f600": 3, "\uffff": 4},  # UTF-16 order != code points
        {"k": '\u2028\x7f\x1f"\\/\b\f\n\r\t\x00'},
        {"a": "\ud800"},  # a lone surrogate: refused
        {"a": [2**53 - 1, -(2**53) + 1]},
        {"a": 2**53},
        {"a": 1.0},
        {1: "non-string key"},
        [True, False, None, (), {}],
    ],
)
def test_canonical_bytes_edge_cases_match_rfc8785(value: Any) -> None:
    assert _ours(value) == _reference(value)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _nested_objects(depth: int, leaf: Any) -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize("depth", [31, 32, 33, 40])
def test_canonical_bytes_depth_limit_matches_rfc8785_path(depth: int) -> None:
    assert _ours(_nested(depth)) == _reference(_nested(depth))
    assert _ours({"a": _nested(depth)}) == _reference({"a": _nested(depth)})
    for leaf in ("s", 7, None, True, {}, []):
        assert _ours(_nested_objects(depth, leaf)) == _reference(_nested_objects(depth, leaf))


class _Str(str):
    pass


def test_subclassed_values_take_the_reference_path() -> None:
    assert canonical_bytes({"a": _Str("x")}) == b'{"a":"x"}'
