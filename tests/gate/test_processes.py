"""Exactly once across OS processes, and across a real SIGKILL.

Every gate here runs in its own spawned process over one ledger (SQLite file or
PostgreSQL database) and the fake checkpoint served on 127.0.0.1. The refund body appends
its effect key to a counter file: that file, not the gate, says how often it ran.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock import ledger
from airlock.gate import Gate, ReceiptSigner, Refused
from airlock.protocol import verify_receipt
from airlock.store import make_engine, verify_chain

from . import workers
from .support import FakeCheckpoint, gate_files

pytestmark = pytest.mark.slow

_SPAWN = multiprocessing.get_context("spawn")
#: A process that does not finish in this long is a failure, not a wait.
_JOIN_S = 90.0


@pytest.fixture
def served(tmp_path: Path, db_url: str) -> Iterator[tuple[FakeCheckpoint, dict[str, Any]]]:
    """The fake checkpoint on 127.0.0.1 (auto-approving), and a gate config for it over a
    migrated ledger, as the spawned processes receive it."""
    fake = FakeCheckpoint(auto_approve=True)
    engine = make_engine(db_url)
    ledger.migrate(engine)
    engine.dispose()
    with fake.serve() as url:
        # Never run out in real time here (recovery runs on a clock set past it): eight
        # processes on one SQLite file at load 7+ took over 4 s between a consume and
        # its commit of executing, and a lease of 5 s (whole seconds, so 4 to 5) was
        # lost there: fenced, and the process failed.
        config = gate_files(tmp_path, checkpoint_url=url, ledger_url=db_url, lease_seconds=60)
        fake.receipt_keys = ReceiptSigner.from_file(config.receipt_key).key_set()
        yield fake, workers.config_values(config)


def _run(target: Any, *args: Any, **kwargs: Any) -> int | None:
    process = _SPAWN.Process(target=target, args=args, kwargs=kwargs)
    process.start()
    process.join(_JOIN_S)
    assert not process.is_alive(), "a gate process hung"
    return process.exitcode


def _race(values: dict[str, Any], tmp_path: Path, shares: list[list[str]]) -> list[dict[str, Any]]:
    """One process per share, released together by a barrier; what each did."""
    barrier = _SPAWN.Barrier(len(shares))
    processes = []
    for i, orders in enumerate(shares):
        results = tmp_path / f"results-{i}.json"
        args = (values, str(tmp_path / "counter"), orders, barrier, str(results))
        process = _SPAWN.Process(target=workers.call_effects, args=args)
        process.start()
        processes.append((process, results))
    for process, _ in processes:
        process.join(_JOIN_S)
        assert process.exitcode == 0, f"a gate process ended {process.exitcode}"
    return [json.loads(results.read_text()) for _, results in processes]


def test_eight_processes_calling_one_approved_effect_run_it_once(
    served: tuple[FakeCheckpoint, dict[str, Any]], tmp_path: Path
) -> None:
    fake, values = served
    done = _race(values, tmp_path, [["order-1"]] * 8)
    assert workers.counted(tmp_path / "counter") == ["refund:order-1"]
    assert sorted(d["done"]["order-1"] for d in done) == ["E_REPLAY"] * 7 + ["ran"]
    assert len(fake.proposals) == 1
    # At least once: two processes may both deliver what the outbox holds, the same
    # receipt, which the checkpoint takes again as it took it first.
    outcomes = {e["payload"] for path, e in fake.receipts if path == "/v1/outcomes"}
    assert len(outcomes) == 1


def test_eight_processes_over_300_effects_run_each_once(
    served: tuple[FakeCheckpoint, dict[str, Any]], tmp_path: Path
) -> None:
    """Each effect is called by two processes, from opposite ends of their list."""
    _, values = served
    orders = [f"order-{i}" for i in range(300)]
    quarters = [orders[q::4] for q in range(4)]
    done = _race(values, tmp_path, [*quarters, *(list(reversed(q)) for q in quarters)])
    assert max(d["seconds"] for d in done) < 60  # from the barrier: 600 calls, 2 cores
    counts = Counter(workers.counted(tmp_path / "counter"))
    assert counts == Counter({f"refund:{o}": 1 for o in orders})
    engine = make_engine(values["ledger_url"])
    try:
        assert verify_chain(engine).ok
    finally:
        engine.dispose()


#: (crash point, lookup) → the state recovery settles, and how often the body ran.
_SETTLES = {
    ("after_consume", True): ("refused", 0),
    ("after_consume", False): ("refused", 0),
    ("after_executing", True): ("failed", 0),
    ("after_executing", False): ("in_doubt", 0),
    ("after_call", True): ("succeeded", 1),
    ("after_call", False): ("in_doubt", 1),
}


@pytest.mark.parametrize(("point", "lookup"), sorted(_SETTLES))
def test_a_sigkilled_call_is_settled_by_recovery_and_never_called_twice(
    served: tuple[FakeCheckpoint, dict[str, Any]], tmp_path: Path, point: str, lookup: bool
) -> None:
    fake, values = served
    counter = tmp_path / "counter"
    exitcode = _run(
        workers.call_effects,
        values,
        str(counter),
        ["order-9"],
        None,
        str(tmp_path / "crashed.json"),
        failpoints=point,
    )
    assert exitcode == -signal.SIGKILL
    state, runs = _SETTLES[(point, lookup)]
    assert len(workers.counted(counter)) == runs

    results = tmp_path / "recovered.json"
    ahead = values["lease_seconds"] + 1
    assert _run(workers.recover, values, str(counter), lookup, ahead, str(results)) == 0
    ((_, effect_key, settled, code),) = json.loads(results.read_text())
    assert (effect_key, settled) == ("refund:order-9", state)
    if point == "after_consume":
        assert code == "E_INTERRUPTED"
    assert len(workers.counted(counter)) == runs

    # Called again: the approval is spent, whatever the recovery settled; a call in
    # doubt says so.
    again = tmp_path / "again.json"
    args = (values, str(counter), ["order-9"], None, str(again))
    assert _run(workers.call_effects, *args) == 0
    replay = "InDoubt" if state == "in_doubt" else "E_REPLAY"
    assert json.loads(again.read_text())["done"] == {"order-9": replay}
    assert len(workers.counted(counter)) == runs
    receipts = [verify_receipt(e, fake.receipt_keys, int(time.time())) for _, e in fake.receipts]
    assert settled in {r.receipt.outcome for r in receipts}


def test_an_in_doubt_call_is_resolved_by_a_person_with_a_receipt(
    served: tuple[FakeCheckpoint, dict[str, Any]], tmp_path: Path
) -> None:
    fake, values = served
    counter = tmp_path / "counter"
    args = (values, str(counter), ["order-7"], None, str(tmp_path / "c.json"))
    assert _run(workers.call_effects, *args, failpoints="after_call") == -signal.SIGKILL
    results = tmp_path / "recovered.json"
    ahead = values["lease_seconds"] + 1
    assert _run(workers.recover, values, str(counter), False, ahead, str(results)) == 0
    ((approval_id, _, state, _),) = json.loads(results.read_text())
    assert state == "in_doubt"
    gate = Gate(
        workers.gate_config(values),
        http=fake.client(),
    )
    try:
        with pytest.raises(Refused) as refused:
            gate.resolve(approval_id, "maybe", "alice", "")  # type: ignore[arg-type]
        assert refused.value.code == "E_INVALID"
        gate.resolve(approval_id, "happened", "alice", "the refund is in the PSP's log")
        with pytest.raises(Refused) as twice:
            gate.resolve(approval_id, "did_not_happen", "bob", "")
        assert twice.value.code == "E_ALREADY_RESOLVED"
        assert gate.status().undelivered == 0
    finally:
        gate.close()
    resolved = [
        verify_receipt(e, fake.receipt_keys, int(time.time())).receipt for _, e in fake.receipts
    ]
    assert [r.resolution.decision for r in resolved if r.resolution is not None] == ["happened"]
