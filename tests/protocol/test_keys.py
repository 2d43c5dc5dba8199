"""Key ids and the trusted key set: derived ids, strict loading, nothing implicit."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from airlock.protocol import KeySet, KeySetError, KeyStatus, key_id
from devstack import factory


def _value() -> dict[str, Any]:
    return factory.keyset("rfc8032-test1", "rfc8032-test2").to_value()


def test_key_id_is_derived_from_the_raw_public_key() -> None:
    raw = factory.signer().public_raw
    assert key_id(raw) == "ed25519:" + hashlib.sha256(raw).hexdigest()[:32]
    # RFC 8032 §7.1 TEST 1 public key
    assert raw.hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"


def test_key_set_round_trips_through_json() -> None:
    data = json.dumps(_value()).encode()
    keys = KeySet.from_json_bytes(data)
    assert len(keys) == 2
    assert keys.to_value() == _value()
    assert all(k.status is KeyStatus.ACTIVE for k in keys.values())


def test_kid_that_does_not_match_its_key_is_refused() -> None:
    value = _value()
    value["keys"][0]["kid"] = value["keys"][1]["kid"]
    with pytest.raises(KeySetError, match="does not match"):
        KeySet.from_value(value)


@pytest.mark.parametrize(
    "edit",
    [
        lambda v: v.update(keys=[]),
        lambda v: v["keys"][0].update(status="trusted"),
        lambda v: v["keys"][0].update(public_key="AAAA"),
        lambda v: v["keys"][0].update(public_key="not base64"),
        lambda v: v["keys"][0].update(not_after=1.5),
        lambda v: v["keys"][0].update(not_after=True),
        lambda v: v["keys"][0].update(extra=1),
        lambda v: v["keys"][0].pop("status"),
        lambda v: v.update(more=1),
        lambda v: v["keys"].append(dict(v["keys"][0])),
    ],
)
def test_malformed_key_set_is_refused(edit: Any) -> None:
    value = _value()
    edit(value)
    with pytest.raises(KeySetError):
        KeySet.from_value(value)


def test_key_set_with_duplicate_json_keys_is_refused() -> None:
    with pytest.raises(KeySetError, match="duplicate"):
        KeySet.from_json_bytes(b'{"keys": [], "keys": []}')


#: The one key the kernel holds: a gate's own receipt key (SECURITY.md), loaded in its
#: receipts module and used by its recorder. Never an approval key.
GATE_RECEIPT_KEY_MODULES = {"gate/_receipts.py", "gate/_record.py"}


def test_kernel_never_holds_a_private_key() -> None:
    # docs/architecture.md#import-boundaries: signing code lives with the key holders, never in the
    # shared kernel; the verification path never holds one.
    from pathlib import Path

    import airlock

    root = Path(airlock.__file__).parent
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "cli" not in p.parts
        and ("Ed25519PrivateKey" in p.read_text() or ".sign(" in p.read_text())
    ]
    assert set(offenders) == GATE_RECEIPT_KEY_MODULES
