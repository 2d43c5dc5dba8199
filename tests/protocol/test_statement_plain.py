"""ApprovalStatement.from_json_bytes' one-pass parse of plain text equals the strict path.

``_from_plain_text`` validates a statement with pydantic's JSON parser, which keeps the
last of duplicate keys, so it must decline (None) wherever it cannot prove the strict
path would give the same statement. These tests hold it to the strict path (loads_strict
then model validation) on honest statements, duplicate-key smuggling, and byte-level
mutations of an honest statement.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from airlock.protocol import ApprovalStatement, Refused, canonical_bytes, loads_strict
from airlock.protocol._action import Resource
from airlock.protocol._approval import (
    STATEMENT_MAX_BYTES,
    Approver,
    PolicyRef,
    _from_plain_text,
)
from airlock.protocol._json import PARSED_STRICTLY
from devstack import factory
from tests.support.mutations import mutate


def _strict(data: bytes) -> ApprovalStatement | None:
    try:
        value: Any = loads_strict(data, max_bytes=STATEMENT_MAX_BYTES)
        return ApprovalStatement.model_validate(value, context=PARSED_STRICTLY)
    except (Refused, ValidationError):
        return None


def _honest() -> bytes:
    return canonical_bytes(factory.statement_value(factory.action_value()))


def _agrees(data: bytes) -> bool:
    plain = _from_plain_text(data)
    return plain is None or plain == _strict(data)


def test_an_honest_statement_takes_the_plain_parse() -> None:
    data = _honest()
    plain = _from_plain_text(data)
    assert plain is not None
    assert plain == _strict(data)


def test_every_statement_field_is_required() -> None:
    # The key count that rules out duplicates assumes no field may be left out: a default
    # would let a smuggled duplicate stand in for an omitted key. Revisit the count first.
    for model in (ApprovalStatement, Resource, Approver, PolicyRef):
        assert all(field.is_required() for field in model.model_fields.values()), model


def _with_duplicate(data: bytes, key: str, value: str, where: str) -> bytes:
    text = data.decode()
    extra = f'"{key}":{json.dumps(value)},'
    if where == "first":
        return ("{" + extra + text[1:]).encode()
    return (text[:-1] + "," + extra[:-1] + "}").encode()


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize(
    ("key", "value"),
    [("audience", "airlock-executor/elsewhere"), ("region", "cn-hangzhou"), ("risk", "low")],
)
def test_a_duplicate_key_is_declined_and_refused(key: str, value: str, where: str) -> None:
    data = _with_duplicate(_honest(), key, value, where)
    assert _from_plain_text(data) is None
    with pytest.raises(Refused):
        ApprovalStatement.from_json_bytes(data)


def test_a_duplicate_nested_key_is_declined() -> None:
    data = _honest().replace(b'"resource":{', b'"resource":{"id":"i-0other0000",', 1)
    assert _from_plain_text(data) is None
    with pytest.raises(Refused):
        ApprovalStatement.from_json_bytes(data)


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace(b'":', b'" :', 1),  # whitespace between tokens
        lambda t: t + b"\n",
        lambda t: t.replace(b'"medium"', b'"\\u006dedium"', 1),  # an escape, same value
    ],
)
def test_other_forms_go_the_strict_way_with_the_same_result(edit: Any) -> None:
    data = edit(_honest())
    assert _from_plain_text(data) is None
    assert ApprovalStatement.from_json_bytes(data) == ApprovalStatement.from_json_bytes(_honest())


def test_a_whitespace_hidden_duplicate_is_refused() -> None:
    # "k" :v hides from a count of '":'; the space alone sends it the strict way.
    data = _with_duplicate(_honest(), "audience", "x-other", "first").replace(b'":', b'" :', 1)
    assert _from_plain_text(data) is None
    with pytest.raises(Refused):
        ApprovalStatement.from_json_bytes(data)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b'"quorum":1', b'"quorum":1.0'),
        (b'"quorum":1', b'"quorum":NaN'),
        (b'"quorum":1', b'"quorum":true'),
        (b'"quorum":1', b'"quorum":01'),
        (b'"issued_at":', b'"issued_at":9007199254740993,"x":'),
    ],
)
def test_numbers_are_refused_alike(old: bytes, new: bytes) -> None:
    data = _honest().replace(old, new, 1)
    assert data != _honest()
    assert _from_plain_text(data) is None
    assert _strict(data) is None


@settings(max_examples=800, deadline=None)
@given(st.data())
def test_plain_parse_agrees_with_the_strict_path_on_mutations(data: st.DataObject) -> None:
    alphabet = b'"\\{}[],:. \t\n01-eEaz\x00\x7f\xc3'
    assert _agrees(mutate(data, _honest(), alphabet, copy_span=40))


def test_a_statement_as_a_memoryview_still_parses() -> None:
    data = _honest()
    assert _from_plain_text(memoryview(data)) is None  # type: ignore[arg-type]
    parsed = ApprovalStatement.from_json_bytes(memoryview(data))  # type: ignore[arg-type]
    assert parsed == ApprovalStatement.from_json_bytes(data)
