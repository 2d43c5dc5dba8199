"""The executor's outbox against the real checkpoint: a mixed batch in one request.

The executor, its ledger and outbox are real; its HTTP client is answered by the
checkpoint app in this process (``test_full_loop._bridge``), which counts the requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from airlock.protocol import KeySet, canonical_bytes
from services.executor import Executor, OutboxReporter, State, checkpoint_client
from services.executor.outbox import delivery_records
from tests.executor.support import InMemoryCloud, receipt_keyset

from .harness import World, approved, signed_receipt
from .test_full_loop import _bridge, _executor, _pull


@dataclass
class Rig:
    world: World
    executor: Executor
    cloud: InMemoryCloud
    paths: list[str]
    reporter: OutboxReporter


def _rig(world: World, tmp_path: Path, answer: Callable[[httpx.Request], bool]) -> Iterator[Rig]:
    world.checkpoint.receipt_keys = receipt_keyset()
    keys = KeySet.from_value(world.client.get("/v1/keys").json())
    cloud = InMemoryCloud()
    executor = _executor(world, tmp_path, cloud, keys)
    bridge = _bridge(world)
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if not answer(request):  # a checkpoint from before POST /v1/receipts
            return httpx.Response(404, json={"error": {"code": "E_NOT_FOUND", "message": "x"}})
        return bridge.handle_request(request)

    client = checkpoint_client(
        "http://checkpoint.test",
        world.tokens["executor"],
        poll_wait_s=1,
        transport=httpx.MockTransport(handler),
    )
    reporter = OutboxReporter(engine=executor.engine, client=client, clock=world.clock)
    try:
        yield Rig(world, executor, cloud, paths, reporter)
    finally:
        client.close()
        executor.engine.dispose()


@pytest.fixture
def rig(world: World, tmp_path: Path) -> Iterator[Rig]:
    yield from _rig(world, tmp_path, lambda _: True)


@pytest.fixture
def old_rig(world: World, tmp_path: Path) -> Iterator[Rig]:
    yield from _rig(world, tmp_path, lambda r: r.url.path != "/v1/receipts")


def _mixed(rig: Rig) -> tuple[str, str, str]:
    """Three receipts queued: an outcome, an outcome the checkpoint has another of
    already (refused for good), and a refusal before the consume (the approval expired)."""
    world = rig.world
    ids = []
    for n in range(3):
        rid = f"i-t4nmixed{n:04d}"
        rig.cloud.add("ecs.instance", rid, "Running")
        _, aid = approved(world, proposal_id=f"prop_mixed{n:07d}", resource_id=rid)
        ids.append(aid)
    bundles = {i["approval_id"]: canonical_bytes(i["bundle"]) for i in _pull(world)["items"]}
    first, other, late = ids
    assert rig.executor.execute(bundles[first]).state is State.SUCCEEDED
    assert rig.executor.execute(bundles[other]).state is State.SUCCEEDED
    hashes = {
        aid: p["action_hash"]
        for aid, p in (
            (a["approval"]["approval_id"], a)
            for a in world.client.get("/v1/proposals", headers=world.auth("bob")).json()["items"]
            if a.get("approval")
        )
    }
    # Another executor sharing the key reported a different outcome of it first.
    failed = signed_receipt(other, hashes[other], "failed")
    taken = world.client.post(
        "/v1/outcomes", json={"receipt": failed}, headers=world.auth("executor")
    )
    assert taken.status_code == 200, taken.text
    world.clock.advance(901)  # past the execution window: refused before the consume
    refused = rig.executor.execute(bundles[late])
    assert (refused.state, refused.refusal_code) == (None, "E_EXPIRED")  # never consumed
    return first, other, late


def _records(rig: Rig) -> list[tuple[str, str, str, int | None, str | None]]:
    return sorted(
        (r["approval_id"], r["kind"], r["status"], r["http_status"], r["error_code"])
        for r in delivery_records(rig.executor.engine)
    )


def test_a_mixed_batch_goes_in_one_request_and_each_receipt_is_recorded_as_answered(
    rig: Rig,
) -> None:
    first, other, late = _mixed(rig)
    assert rig.reporter.flush() == 3
    assert rig.paths == ["/v1/receipts"]
    assert _records(rig) == sorted(
        [
            (first, "outcome", "delivered", 200, None),
            (other, "outcome", "rejected", 409, "E_STATE"),
            (late, "refusal", "delivered", 200, None),
        ]
    )
    [rejected] = [r for r in delivery_records(rig.executor.engine) if r["status"] == "rejected"]
    assert rejected["detail"] == (
        '{"error":{"code":"E_STATE","message":"an outcome is already recorded"}}'
    )
    assert rig.reporter.flush() == 0  # each recorded once
    assert rig.paths == ["/v1/receipts"]
    shown = rig.world.client.get("/v1/proposals/prop_mixed0000002", headers=rig.world.auth("bob"))
    [note] = shown.json()["executor_refusals"]
    assert (note["approval_id"], note["refusal_code"]) == (late, "E_EXPIRED")


def test_a_checkpoint_without_the_batch_endpoint_gets_one_receipt_a_request(
    old_rig: Rig,
) -> None:
    rig = old_rig
    first, other, late = _mixed(rig)
    assert rig.reporter.flush() == 3
    assert rig.paths == ["/v1/receipts", "/v1/outcomes", "/v1/outcomes", "/v1/refusals"]
    assert _records(rig) == sorted(
        [
            (first, "outcome", "delivered", 200, None),
            (other, "outcome", "rejected", 409, "E_STATE"),
            (late, "refusal", "delivered", 200, None),
        ]
    )
