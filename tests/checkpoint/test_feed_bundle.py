"""A feed item's bundle is the bundle ``make_bundle`` writes, key for key and in order.

The feed builds each bundle's JSON value directly instead of writing its JCS text and
parsing it back. These tests hold the feed's answer, byte for byte, to the one built
through ``make_bundle``, and each bundle's canonical bytes to the ones the executor
verifies.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from airlock.protocol import APPROVAL_PAYLOAD_TYPE, Envelope, canonical_bytes, make_bundle
from services.checkpoint import feed as feed_module

from .harness import World, approved


def _through_make_bundle(action_bytes: bytes, envelope: Envelope) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(make_bundle(action_bytes, envelope))
    return value


def test_a_feed_page_is_the_one_make_bundle_writes(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(3):
        approved(world, proposal_id=f"prop_bundle{n:08d}", resource_id=f"i-t4nbundle{n:04d}")
    ours = world.client.get("/v1/feed", headers=world.auth("executor"))
    monkeypatch.setattr(feed_module, "bundle_value", _through_make_bundle)
    theirs = world.client.get("/v1/feed", headers=world.auth("executor"))
    assert ours.status_code == theirs.status_code == 200
    assert len(ours.json()["items"]) == 3
    assert ours.content == theirs.content


def test_a_bundle_value_is_make_bundles_in_order(world: World) -> None:
    _, approval_id = approved(world)
    page = world.client.get("/v1/feed", headers=world.auth("executor")).json()
    (item,) = page["items"]
    bundle = item["bundle"]
    envelope = Envelope.from_value(bundle["envelope"], payload_type=APPROVAL_PAYLOAD_TYPE)
    action_bytes = base64.b64decode(bundle["action"])
    value = feed_module.bundle_value(action_bytes, envelope)
    expected = _through_make_bundle(action_bytes, envelope)
    # json.dumps keeps insertion order: equal text means equal keys, order and strings.
    assert json.dumps(value) == json.dumps(expected)
    assert canonical_bytes(value) == make_bundle(action_bytes, envelope)
    assert item["approval_id"] == approval_id
