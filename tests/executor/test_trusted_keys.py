"""The executor re-reads its trusted key file: a revocation takes effect without a restart.

Before this, an executor kept trusting a key revoked after it started until someone
restarted it. The file is looked at before every execution; while it is missing or
malformed nothing is verified, recorded or consumed (fails closed, zero side effects),
and each key set a worker starts trusting is in the audit chain.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from airlock.protocol import KeySet, KeyStatus, RefusalCode, canonical_bytes
from airlock.store import make_engine, verify_chain
from services.executor import (
    DirectorySource,
    Executor,
    OutboxReporter,
    Shutdown,
    State,
    TrustedKeysFile,
    TrustedKeysUnavailable,
    checkpoint_client,
    serve,
)
from services.executor.models import ledger, refusals
from services.executor.recover import drain

from .support import (
    BINDING,
    LEASE,
    FakeClock,
    InMemoryCloud,
    StopAfterFailures,
    approval_signer,
    make_test_bundle,
    receipt_signer,
)


def _write_keys(path: Path, status: KeyStatus = KeyStatus.ACTIVE) -> None:
    # Write-then-rename, the way an operator's re-export should replace the file.
    data = canonical_bytes(KeySet([approval_signer().trusted_key(status)]).to_value())
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _counts(executor: Executor) -> tuple[int, int, int]:
    with executor.engine.connect() as conn:
        return (
            conn.execute(sa.select(sa.func.count()).select_from(ledger)).scalar_one(),
            conn.execute(sa.select(sa.func.count()).select_from(refusals)).scalar_one(),
            conn.execute(sa.text("SELECT count(*) FROM audit_log")).scalar_one(),
        )


def _trusted_key_events(executor: Executor) -> list[dict[str, Any]]:
    with executor.engine.connect() as conn:
        texts = conn.execute(sa.text("SELECT event FROM audit_log ORDER BY seq")).scalars()
        events = [json.loads(t) for t in texts]
    return [e for e in events if e["type"] == "executor.trusted_keys"]


@pytest.fixture
def keyed(migrated_url: str, tmp_path: Path) -> Iterator[tuple[Executor, Path, InMemoryCloud]]:
    path = tmp_path / "trusted-keys.json"
    _write_keys(path)
    cloud = InMemoryCloud()
    executor = Executor(
        engine=make_engine(migrated_url),
        keys=TrustedKeysFile(path),
        binding=BINDING,
        reader=cloud,
        writer=cloud,
        signer=receipt_signer(),
        clock=FakeClock(),
        worker_id="worker-keys",
        lease_seconds=LEASE,
    )
    yield executor, path, cloud
    executor.engine.dispose()


def test_a_key_revoked_in_the_file_is_refused_at_the_next_bundle_without_restart(
    keyed: tuple[Executor, Path, InMemoryCloud],
) -> None:
    executor, path, cloud = keyed
    first, second = (make_test_bundle(n, tag="kfile") for n in (1, 2))
    for b in (first, second):
        cloud.add("ecs.instance", b.resource_id, "Running")

    assert executor.execute(first.raw).state is State.SUCCEEDED

    _write_keys(path, KeyStatus.REVOKED)
    refused = executor.execute(second.raw)
    assert refused.refusal_code is RefusalCode.E_KEY_REVOKED
    assert cloud.writes_for(second.resource_id) == 0

    # Both key sets this worker trusted are on the record, in order, with their status.
    events = _trusted_key_events(executor)
    assert [[k["status"] for k in e["keys"]] for e in events] == [["active"], ["revoked"]]
    assert events[0]["sha256"] != events[1]["sha256"]
    assert verify_chain(executor.engine).ok


def test_an_unchanged_file_is_not_recorded_again(
    keyed: tuple[Executor, Path, InMemoryCloud],
) -> None:
    executor, _, cloud = keyed
    for n in range(3):
        b = make_test_bundle(n, tag="ksame")
        cloud.add("ecs.instance", b.resource_id, "Running")
        assert executor.execute(b.raw).state is State.SUCCEEDED
    assert len(_trusted_key_events(executor)) == 1


@pytest.mark.parametrize("damage", ["missing", "malformed", "empty"])
def test_a_missing_or_malformed_key_file_fails_closed_with_zero_side_effects(
    keyed: tuple[Executor, Path, InMemoryCloud], damage: str
) -> None:
    executor, path, cloud = keyed
    warm = make_test_bundle(0, tag="kwarm")
    cloud.add("ecs.instance", warm.resource_id, "Running")
    assert executor.execute(warm.raw).state is State.SUCCEEDED

    b = make_test_bundle(1, tag="kbad")
    cloud.add("ecs.instance", b.resource_id, "Running")
    if damage == "missing":
        path.unlink()
    elif damage == "malformed":
        path.write_bytes(b'{"keys": [')
    else:
        path.write_bytes(canonical_bytes(KeySet([]).to_value()))
    before = _counts(executor)
    with pytest.raises(TrustedKeysUnavailable, match="trusted key set"):
        executor.execute(b.raw)
    assert _counts(executor) == before  # no ledger row, no refusal, no audit event
    assert cloud.writes_for(b.resource_id) == 0

    # Restored: the same bundle goes through (it was never consumed).
    _write_keys(path)
    assert executor.execute(b.raw).state is State.SUCCEEDED
    assert cloud.writes_for(b.resource_id) == 1


def test_a_bundle_that_meets_a_broken_key_file_stays_in_the_source(
    keyed: tuple[Executor, Path, InMemoryCloud], tmp_path: Path
) -> None:
    executor, path, cloud = keyed
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    b = make_test_bundle(1, tag="kinbox")
    cloud.add("ecs.instance", b.resource_id, "Running")
    (inbox / "1.json").write_bytes(b.raw)
    source = DirectorySource(inbox)

    path.write_bytes(b"not json")
    with pytest.raises(TrustedKeysUnavailable):
        drain(executor, source)
    assert [p.name for p in inbox.glob("*.json")] == ["1.json"]  # not acknowledged

    _write_keys(path)
    [outcome] = drain(executor, source)
    assert outcome.state is State.SUCCEEDED
    assert list(inbox.glob("*.json")) == []
    assert cloud.writes_for(b.resource_id) == 1


def test_the_file_is_parsed_again_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    _write_keys(path)
    keys = TrustedKeysFile(path)
    first = keys.current()
    assert keys.current() is first
    _write_keys(path, KeyStatus.RETIRED)
    second = keys.current()
    assert second is not first
    [kid] = list(second.keys)
    assert second.keys[kid].status is KeyStatus.RETIRED


def test_a_missing_key_file_at_start_does_not_stop_receipt_delivery(
    keyed: tuple[Executor, Path, InMemoryCloud], tmp_path: Path
) -> None:
    """Recovery fails closed without keys (rightly) and is retried, but the receipts of
    what was already decided are delivered meanwhile: they need no key to verify."""
    executor, path, cloud = keyed
    b = make_test_bundle(1, tag="kstart")
    cloud.add("ecs.instance", b.resource_id, "Running")
    assert executor.execute(b.raw).state is State.SUCCEEDED  # its receipt is queued
    path.unlink()
    shutdown = Shutdown()
    posted: list[bytes] = []

    def checkpoint(request: httpx.Request) -> httpx.Response:
        posted.append(request.content)
        shutdown.request()
        return httpx.Response(200, json={"results": [{"status": 200}]})

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    with checkpoint_client(
        "http://checkpoint.test", "t", poll_wait_s=1, transport=httpx.MockTransport(checkpoint)
    ) as client:
        serve(
            executor,
            DirectorySource(inbox),
            shutdown=shutdown,
            reporter=OutboxReporter(engine=executor.engine, client=client, clock=executor.clock),
            error_backoff=StopAfterFailures(shutdown, 5),
        )
    [body] = posted
    with executor.engine.connect() as conn:
        receipt = conn.execute(sa.select(ledger.c.receipt)).scalar_one()
    assert json.loads(body) == {"receipts": [{"kind": "outcome", "receipt": json.loads(receipt)}]}
