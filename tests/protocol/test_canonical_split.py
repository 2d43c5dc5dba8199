"""verify_bundle's fast split of a canonical bundle gives what the general path gives.

``_split_canonical`` reads steps (2)-(3) straight off a bundle in the exact form
``make_bundle`` writes. It may decline (None) for any input, sending it to the general
strict parser; whenever it does not decline, its envelope and action bytes must be
exactly what the general path produces for the same bytes, and the general path must
accept those bytes. These tests compare the two on honest bundles, on bundles with odd
key ids and signature counts, and on byte-level mutations of honest bundles.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlock.protocol import (
    APPROVAL_PAYLOAD_TYPE,
    Envelope,
    Refused,
    Signature,
    _verify,
    canonical_bytes,
    loads_strict,
    make_bundle,
    verify_bundle,
)
from airlock.protocol._b64 import b64decode_strict
from airlock.protocol._verify import BUNDLE_MAX_BYTES, _split_canonical
from devstack import factory
from devstack.factory import BINDING, NOW, bundle_for
from tests.support.mutations import mutate


def _general(raw: bytes) -> tuple[Envelope, bytes] | None:
    """Steps (2)-(3) by the general path, or None where it refuses."""
    try:
        value: Any = loads_strict(raw, max_bytes=BUNDLE_MAX_BYTES)
        if not isinstance(value, dict) or set(value) != {"action", "envelope"}:
            return None
        envelope = Envelope.from_value(value["envelope"], payload_type=APPROVAL_PAYLOAD_TYPE)
        return envelope, b64decode_strict(value["action"])
    except (Refused, ValueError):
        return None


def _agrees(raw: bytes) -> bool:
    fast = _split_canonical(raw)
    return fast is None or fast == _general(raw)


def test_an_honest_bundle_takes_the_fast_split() -> None:
    raw = bundle_for()
    fast = _split_canonical(raw)
    assert fast is not None
    assert fast == _general(raw)


def test_verify_bundle_uses_the_fast_split_for_an_honest_bundle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With the general bundle parse out of the way, an honest bundle still verifies...
    calls: list[int] = []
    real = loads_strict

    def counting(data: bytes, **kw: Any) -> Any:
        calls.append(len(data))
        return real(data, **kw)

    monkeypatch.setattr(_verify, "loads_strict", counting)
    raw = bundle_for()
    verify_bundle(raw, factory.keyset(), BINDING, NOW)
    # ...and loads_strict saw only the action, never the whole bundle.
    assert len(raw) not in calls


def _with_escape(raw: bytes) -> bytes:
    # "action":"eyJ..." -> "action":"\u0065yJ...": the same string to a JSON parser.
    head = b'{"action":"'
    assert raw.startswith(head)
    char = raw[len(head) : len(head) + 1].decode()
    return head + b"\\u%04x" % ord(char) + raw[len(head) + 1 :]


def test_an_escaped_but_equal_bundle_goes_the_general_way_and_verifies() -> None:
    raw = _with_escape(bundle_for())
    assert _split_canonical(raw) is None
    verified = verify_bundle(raw, factory.keyset(), BINDING, NOW)
    assert verified == verify_bundle(bundle_for(), factory.keyset(), BINDING, NOW)


@pytest.mark.parametrize(
    "edit",
    [
        lambda raw: b" " + raw,  # leading whitespace
        lambda raw: raw + b"\n",  # trailing whitespace
        lambda raw: raw.replace(b'{"action":', b'{ "action":', 1),
        lambda raw: raw.replace(b'"signatures":[', b'"signatures": [', 1),
    ],
)
def test_other_valid_forms_go_the_general_way(edit: Any) -> None:
    raw = edit(bundle_for())
    assert _split_canonical(raw) is None
    assert _general(raw) == _general(bundle_for())


def _reordered(raw: bytes) -> bytes:
    value = json.loads(raw)
    return json.dumps({"envelope": value["envelope"], "action": value["action"]}).encode()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(_reordered(bundle_for()), id="keys-out-of-order"),
        pytest.param(bundle_for()[:-1], id="truncated"),
        pytest.param(bundle_for() + b"}", id="trailing-brace"),
        pytest.param(bundle_for().replace(b'"}]}}', b'"}]}}}', 1), id="extra-close"),
        pytest.param(b"\xef\xbb\xbf" + bundle_for(), id="bom"),
    ],
)
def test_malformed_or_reordered_bundles_are_declined(raw: bytes) -> None:
    assert _split_canonical(raw) is None


def _bundle_with(signatures: list[tuple[str, bytes]], payload: bytes = b"{}") -> bytes:
    envelope = Envelope(
        APPROVAL_PAYLOAD_TYPE, payload, tuple(Signature(k, s) for k, s in signatures)
    )
    return make_bundle(b'{"a":1}', envelope)


keyids = st.text(st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=140)
sigs = st.binary(max_size=70)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(keyids, sigs), min_size=0, max_size=6), st.binary(max_size=64))
def test_fast_split_agrees_with_the_general_path_on_made_bundles(
    signatures: list[tuple[str, bytes]], payload: bytes
) -> None:
    raw = _bundle_with(signatures, payload)
    assert _agrees(raw)
    if 1 <= len(signatures) <= 4 and all(
        len(k) <= 128 and k.isascii() and k.isprintable() and '"' not in k and "\\" not in k
        for k, _ in signatures
    ):
        # Every make_bundle output with plain key ids takes the fast split.
        assert _split_canonical(raw) is not None


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_fast_split_agrees_with_the_general_path_on_mutated_bundles(data: st.DataObject) -> None:
    alphabet = b'"\\{}[],: \t\n0aA+/=\xc3\xa9\x00\x7f'
    assert _agrees(mutate(data, bundle_for(), alphabet))


def test_a_signature_text_that_is_not_canonical_base64_is_declined() -> None:
    value = json.loads(bundle_for())
    sig = value["envelope"]["signatures"][0]["sig"]
    # Last quantum "g==" with non-zero padding bits: decodes, but is not canonical.
    value["envelope"]["signatures"][0]["sig"] = sig[:-3] + "h=="
    raw = canonical_bytes(value)
    assert _split_canonical(raw) is None and _general(raw) is None
    with pytest.raises(Refused):
        verify_bundle(raw, factory.keyset(), BINDING, NOW)


def test_a_bundle_with_five_signatures_is_declined_and_refused() -> None:
    value = json.loads(bundle_for())
    one = value["envelope"]["signatures"][0]
    value["envelope"]["signatures"] = [one] * 5
    raw = canonical_bytes(value)
    assert _split_canonical(raw) is None
    with pytest.raises(Refused):
        verify_bundle(raw, factory.keyset(), BINDING, NOW)


@pytest.mark.parametrize("char", ["\x01", "\x1f", "\t"])
def test_a_raw_control_character_in_a_key_id_is_declined(char: str) -> None:
    # Written raw, not escaped: strict JSON refuses it, so the fast split must decline.
    honest = bundle_for()
    keyid = factory.signer().keyid.encode()
    raw = honest.replace(keyid, keyid[:8] + char.encode() + keyid[9:], 1)
    assert raw != honest
    assert _general(raw) is None
    assert _split_canonical(raw) is None


def test_a_bundle_as_a_memoryview_or_bytearray_still_verifies() -> None:
    raw = bundle_for()
    expected = verify_bundle(raw, factory.keyset(), BINDING, NOW)
    for view in (memoryview(raw), bytearray(raw)):
        assert _split_canonical(view) is None  # type: ignore[arg-type]
        assert verify_bundle(view, factory.keyset(), BINDING, NOW) == expected  # type: ignore[arg-type]


def test_a_bundle_as_text_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        verify_bundle(bundle_for().decode(), factory.keyset(), BINDING, NOW)  # type: ignore[arg-type]
