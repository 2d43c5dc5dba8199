"""The whole-stack fault sweep, bounded for CI (``python -m eval.faults --seeds N`` runs more).

Real processes on loopback (devcloud, checkpoint, the executor daemon on the feed); real
SIGKILLs at named failpoints and at random moments; devcloud 5xx, throttling,
apply-then-drop and latency; checkpoint restarts; on PostgreSQL, the executor's ledger
connections terminated. Every seed must keep every invariant: at most one write per
approval by devcloud's write log, no approval silently lost, both audit chains and every
receipt verify. The seeds are chosen so that every kind of fault is drawn at least once.
The same sweep runs against moto (AWS's double) over a subset of seeds, judged by moto's
own record.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from eval.faults import FAULT_KINDS, make_schedule, run_sweep
from eval.faults._schedule import ALL_FAILPOINTS

# Few seeds, chosen so that each database draws every kind of fault it can meet (the
# test below checks it): each seed starts the whole stack, ~18 s; `python -m eval.faults
# --seeds N` sweeps as many as wanted.
_SQLITE_SEEDS = (0, 9, 22)
_POSTGRES_SEEDS = (1004, 1020)
#: Against moto, a representative subset (60-80 s with the stack's start; the whole
#: matrix runs against devcloud above): an EC2 stop, an RDS stop and an EC2 terminate that
#: succeed; an executor armed at before_cursor_commit when the approvals arrive (it dies
#: there); SIGKILLs mid-execution; status, protect-tag and gone drift before approval.
_MOTO_SEEDS = (7, 14, 33)


def _kinds(seeds: tuple[int, ...], *, postgres: bool) -> set[str]:
    return {f.kind for s in seeds for f in make_schedule(s, postgres=postgres).faults}


def test_a_schedule_is_a_function_of_its_seed() -> None:
    assert make_schedule(7) == make_schedule(7)
    assert make_schedule(7) != make_schedule(8)


def test_schedules_place_faults_where_they_can_bite() -> None:
    for seed in range(300):
        schedule = make_schedule(seed, postgres=True)
        assert 2 <= len(schedule.targets) <= 4
        assert 1 <= len(schedule.faults) <= 3
        steps = schedule.steps
        last_approval = max(i for i, s in enumerate(steps) if s.kind == "approve")
        for i, step in enumerate(steps):
            fault = step.fault
            if fault is None:
                continue
            if fault.kind == "drift":
                # out of band, before its own target's approval
                approval = next(
                    j
                    for j, s in enumerate(steps)
                    if s.kind == "approve" and s.target == fault.target
                )
                assert i < approval
            if fault.kind.startswith(("devcloud.", "executor.failpoint")):
                assert i < last_approval  # a write or an item still to come
            if fault.kind == "executor.failpoint":
                assert fault.arg in ALL_FAILPOINTS
        assert "postgres.cut" not in {f.kind for f in make_schedule(seed).faults}


def test_the_ci_seeds_draw_every_kind_of_fault() -> None:
    assert _kinds(_SQLITE_SEEDS, postgres=False) == set(FAULT_KINDS) - {"postgres.cut"}
    assert _kinds(_POSTGRES_SEEDS, postgres=True) == set(FAULT_KINDS) - {
        "checkpoint.restart",
        "devcloud.latency",
    }


@pytest.mark.slow
def test_fault_sweep_keeps_every_invariant_with_a_sqlite_ledger(tmp_path: Path) -> None:
    out = io.StringIO()
    result = run_sweep(list(_SQLITE_SEEDS), db="sqlite", workdir=tmp_path, out=out)
    assert result.failure is None, result.failure.render()
    assert result.seeds_run == list(_SQLITE_SEEDS)
    assert sum(result.ends.values()) >= 2 * len(_SQLITE_SEEDS)
    # each approval was judged by the write log and its receipts
    assert result.checks["writes<=1"] == sum(result.ends.values())
    assert result.checks["receipt-verifies"] >= sum(result.ends.values())
    assert sum(result.crashes.values()) >= 1  # armed failpoints did fire


@pytest.mark.slow
@pytest.mark.postgres
def test_fault_sweep_keeps_every_invariant_with_a_postgres_ledger(
    tmp_path: Path, pg_server: str
) -> None:
    out = io.StringIO()
    result = run_sweep(
        list(_POSTGRES_SEEDS), db="postgres", pg_admin_url=pg_server, workdir=tmp_path, out=out
    )
    assert result.failure is None, result.failure.render()
    assert result.seeds_run == list(_POSTGRES_SEEDS)
    assert result.faults["postgres.cut"] >= 1
    assert result.checks["writes<=1"] == sum(result.ends.values())


@pytest.mark.slow
def test_fault_sweep_keeps_every_invariant_against_moto(tmp_path: Path) -> None:
    """The sweep with the executor writing to a moto server (IAM enforced), judged by
    moto's record of every write request that reached it. A subset of seeds, not the
    full matrix, to bound the suite's time: each moto seed costs 5-20 s. moto cannot fail
    a write on demand, so these schedules draw no ``devcloud.*`` fault."""
    out = io.StringIO()
    result = run_sweep(list(_MOTO_SEEDS), db="sqlite", cloud="moto", workdir=tmp_path, out=out)
    assert result.failure is None, result.failure.render()
    assert result.seeds_run == list(_MOTO_SEEDS)
    assert result.checks["writes<=1"] == sum(result.ends.values())
    # exactly one write, by moto's record, for each kind that succeeded
    for verb in ("StopInstances", "StopDBInstance", "TerminateInstances"):
        assert result.checks[f"one-write:{verb}"] >= 1, verb
    assert not any(k.startswith("devcloud.") for k in result.faults)
    assert {"drift:protect", "drift:status", "drift:gone"} <= set(result.faults)
    assert sum(result.crashes.values()) >= 1  # an armed failpoint did fire
