"""parse_plain_action, verify_bundle's one-pass action parse, equals the strict path.

``parse_plain_action`` validates an action with pydantic's JSON parser, which keeps the
last of duplicate keys and accepts floats in open-ended fields, so it must decline
(None) wherever it cannot prove the strict path (loads_strict, then parse_action_value)
would give the same action. These tests hold it to that on honest actions, smuggled
duplicates, floats, large integers, deep nesting, and byte-level mutations.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlock.protocol import (
    ProposedAction,
    Refused,
    _verify,
    canonical_bytes,
    loads_strict,
    verify_bundle,
)
from airlock.protocol._action import (
    ACTION_MAX_BYTES,
    Precondition,
    Resource,
    parse_action_value,
    parse_plain_action,
)
from devstack import factory
from devstack.factory import BINDING, NOW, bundle_for
from tests.support.mutations import mutate


def _strict(data: bytes) -> ProposedAction | None:
    try:
        return parse_action_value(loads_strict(data, max_bytes=ACTION_MAX_BYTES))
    except Refused:
        return None


def _honest(**evidence: Any) -> bytes:
    value = factory.action_value()
    value["evidence"].update(evidence)
    return canonical_bytes(value)


def _agrees(data: bytes) -> bool:
    plain = parse_plain_action(data)
    return plain is None or plain == _strict(data)


def test_an_honest_action_takes_the_plain_parse() -> None:
    data = _honest()
    plain = parse_plain_action(data)
    assert plain is not None and plain == _strict(data)


def test_verify_bundle_parses_an_honest_action_without_loads_strict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("loads_strict called")

    monkeypatch.setattr(_verify, "loads_strict", refuse)
    verified = verify_bundle(bundle_for(), factory.keyset(), BINDING, NOW)
    assert verified.action == _strict(verified.action_bytes)


def test_every_fixed_action_field_is_required() -> None:
    # The key count that rules out duplicates assumes no field may be left out.
    for model in (ProposedAction, Resource, Precondition):
        assert all(field.is_required() for field in model.model_fields.values()), model


def _insert_member(data: bytes, after: bytes, member: bytes) -> bytes:
    assert after in data
    return data.replace(after, after + member, 1)


@pytest.mark.parametrize(
    ("after", "member"),
    [
        (b"{", b'"operation":"delete",'),  # a top-level duplicate, first
        (b'"evidence":{', b'"samples":1,'),  # a duplicate inside evidence
        (b'"params":{', b'"stopped_mode":"KeepCharging",'),  # inside params
        (b'"resource":{', b'"id":"i-0other0000",'),  # inside resource
        (b'"precondition":{', b'"status":"Stopped",'),
    ],
)
def test_a_duplicate_key_is_declined_and_refused(after: bytes, member: bytes) -> None:
    data = _insert_member(_honest(), after, member)
    assert parse_plain_action(data) is None
    assert _strict(data) is None


def test_a_duplicate_hidden_by_whitespace_is_declined() -> None:
    data = _insert_member(_honest(), b"{", b'"operation" :"delete",')
    assert parse_plain_action(data) is None
    assert _strict(data) is None


@pytest.mark.parametrize(
    "evidence",
    [
        {"ratio": "FLOAT"},
        {"n": 2**53},
        {"n": -(2**53)},
        {"deep": "DEEP"},
    ],
)
def test_values_the_strict_path_refuses_are_declined(evidence: dict[str, Any]) -> None:
    text = _honest(**{k: 0 for k in evidence}).decode()
    for key, value in evidence.items():
        if value == "FLOAT":
            literal = "0.5"
        elif value == "DEEP":
            literal = "[" * 40 + "]" * 40
        else:
            literal = json.dumps(value)
        text = text.replace(f'"{key}":0', f'"{key}":{literal}', 1)
    data = text.encode()
    assert parse_plain_action(data) is None
    assert _strict(data) is None


def test_nesting_at_the_plain_limit_is_accepted_and_agrees() -> None:
    data = _honest(deep=json.loads("[" * 29 + "]" * 29))
    plain = parse_plain_action(data)
    assert plain is not None and plain == _strict(data)


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace(b'":', b'": ', 1),  # whitespace between tokens
        lambda t: b"\n" + t,
        lambda t: t.replace(b'"stop"', b'"\\u0073top"', 1),  # an escape, same value
        lambda t: t.replace(b"Idle", "\u00cddle".encode(), 1),  # non-ASCII text
    ],
)
def test_other_forms_go_the_strict_way(edit: Any) -> None:
    data = edit(_honest())
    assert data != _honest()
    assert parse_plain_action(data) is None


@settings(max_examples=800, deadline=None)
@given(st.data())
def test_plain_parse_agrees_with_the_strict_path_on_mutations(data: st.DataObject) -> None:
    alphabet = b'"\\{}[],:. \t\n01-eE5az\x00\x7f\xc3'
    assert _agrees(mutate(data, _honest(), alphabet, copy_span=60))


def test_an_action_as_a_memoryview_is_declined() -> None:
    assert parse_plain_action(memoryview(_honest())) is None  # type: ignore[arg-type]
