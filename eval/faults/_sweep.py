"""Run seeds over a running stack, batch by batch, and summarise.

One stack (checkpoint, executor daemon, devcloud or moto; no web app) serves a batch of
seeds; each seed gets instances of its own, so its invariants are its own. A seed that
breaks an invariant (or cannot reach quiescence) stops the run: its schedule, what each
step did, the violations and the services' last log lines are printed, and the batch's
directory is kept.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from devstack.moto import running_moto
from devstack.stack import Stack, running_stack

from ._check import Issued, Judge, NotQuiescent
from ._clouds import Cloud, CloudName, Devcloud, Moto
from ._rig import Rig, RigError
from ._schedule import Schedule, make_schedule

__all__ = ["SeedFailure", "SweepResult", "run_sweep"]

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
#: How long a seed may take to settle after its last step; a crash's lease (3 s), a
#: recovery pass (1 s) and the outbox's backoff fit many times over.
SETTLE_TIMEOUT = 60.0


@dataclass
class SeedFailure:
    seed: int  # -1: a write on no seed's resource
    schedule: Schedule | None
    notes: list[str]
    violations: list[str]
    logs: str
    workdir: Path

    def render(self) -> str:
        lines = [f"FAILED seed {self.seed}"]
        if self.schedule is not None:
            lines.append(self.schedule.describe())
        lines.append("what happened:")
        lines += [f"  {n}" for n in self.notes]
        lines.append("violations:")
        lines += [f"  {v}" for v in self.violations]
        lines.append(f"stack directory kept: {self.workdir}")
        lines.append(self.logs)
        return "\n".join(lines)


@dataclass
class SweepResult:
    db: str
    cloud: CloudName = "devcloud"
    seeds_run: list[int] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    ends: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)
    stacks: int = 0
    wall: float = 0.0
    failure: SeedFailure | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def summary(self) -> str:
        n = len(self.seeds_run)
        span = f"{self.seeds_run[0]}..{self.seeds_run[-1]}" if n else "none"
        rate = n / self.wall if self.wall else 0.0
        lines = [
            f"fault sweep: {n} seeds ({span}) against {self.cloud}, ledger on {self.db},"
            f" {self.stacks} stack start(s), wall {self.wall:.1f} s ({rate:.2f} seeds/s)",
            "result: PASS" if self.failure is None else f"result: FAIL at seed {self.failure.seed}",
            f"approvals: {sum(self.ends.values())} — "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.ends.items())),
            f"faults injected: {sum(self.faults.values())} — "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())),
            f"executor crashes at armed failpoints: {sum(self.crashes.values())} — "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.crashes.items())),
            f"invariant checks passed: {sum(self.checks.values())} — "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.checks.items())),
        ]
        return "\n".join(lines)


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def _pg_database(admin_url: str) -> Iterator[str]:
    """A fresh PostgreSQL database for one batch's ledger; dropped afterwards."""
    name = f"airlock_faults_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(admin_url), autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(
                sql.Identifier(name)
            )
        )
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(_libpq(admin_url), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def _run_seed(
    rig: Rig, judge: Judge, schedule: Schedule, result: SweepResult, notes: list[str]
) -> SeedFailure | None:
    violations: list[str] = []
    try:
        # Faults left from the previous seed (an unconsumed fail/drop, a latency) end here.
        rig.reset_cloud_faults()
        rig.supervise()
        proposals = {t.index: rig.prepare(t) for t in schedule.targets}
        issued: list[Issued] = []
        for i, step in enumerate(schedule.steps):
            rig.supervise()
            t0 = time.monotonic()
            if step.kind == "approve":
                target = schedule.targets[step.target]
                proposal = proposals[step.target]
                approval_id, at = rig.approve(target, proposal)
                issued.append(
                    Issued(target, proposal["id"], proposal["action_hash"], approval_id, at)
                )
                notes.append(
                    f"step {i} ({time.monotonic() - t0:.2f}s): {target.proposal_id} approved"
                    f" as {approval_id}"
                )
            else:
                assert step.fault is not None
                did = rig.inject(step.fault, schedule.targets)
                notes.append(f"step {i} ({time.monotonic() - t0:.2f}s): {did}")
                result.faults[step.fault.label] += 1
        t0 = time.monotonic()
        # Settle with the armed executor still running: its point may be reached only by
        # the outbox or by recovery; supervise() restarts it unarmed when it dies.
        ends = judge.settle(issued, SETTLE_TIMEOUT)
        notes.append(
            f"ended in {time.monotonic() - t0:.2f}s: "
            + ", ".join(f"{k} {v}" for k, v in ends.items())
        )
        rig.disarm()
        verdict = judge.judge(issued, ends)
        violations = verdict.violations
        if not violations:
            result.ends.update(ends.values())
            result.checks.update(verdict.checks)
    except (NotQuiescent, RigError) as exc:
        violations = [f"{type(exc).__name__}: {exc}"]
    except Exception as exc:  # an assertion in the stack helper, an HTTP error: report it
        violations = [f"{type(exc).__name__}: {exc}"]
    if not violations:
        return None
    return SeedFailure(schedule.seed, schedule, notes, violations, rig.logs(), rig.stack.workdir)


def run_sweep(
    seeds: Sequence[int],
    *,
    db: Literal["sqlite", "postgres"] = "sqlite",
    cloud: CloudName = "devcloud",
    workdir: Path,
    batch: int = 100,
    pg_admin_url: str = DEFAULT_PG_URL,
    keep: bool = False,
    out: TextIO = sys.stdout,
    approvals: tuple[int, int] = (2, 4),
    faults: tuple[int, int] = (1, 3),
    verbose: bool = False,
) -> SweepResult:
    """Run ``seeds`` in batches of ``batch`` per stack start; stop at the first failure.

    ``cloud``: the executor writes to devcloud, or to a moto server (IAM enforced) beside
    the stack (whose devcloud then serves nobody).
    """
    result = SweepResult(db=db, cloud=cloud)
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)

    def schedule_of(seed: int) -> Schedule:
        return make_schedule(
            seed, postgres=db == "postgres", approvals=approvals, faults=faults, cloud=cloud
        )

    try:
        for b in range(0, len(seeds), batch):
            chunk = seeds[b : b + batch]
            bdir = workdir / f"batch-{chunk[0]:07d}"
            with (
                _ledger(db, pg_admin_url) as ledger_url,
                _cloud_stack(cloud, bdir, ledger_url) as (stack, world),
            ):
                result.stacks += 1
                rig = Rig(stack, world, pg_admin_url=pg_admin_url if db == "postgres" else None)
                judge = Judge(rig)
                try:
                    for seed in chunk:
                        notes: list[str] = []
                        t0 = time.monotonic()
                        failure = _run_seed(rig, judge, schedule_of(seed), result, notes)
                        if failure is not None:
                            result.failure = failure
                            print(failure.render(), file=out, flush=True)
                            return result
                        result.seeds_run.append(seed)
                        if verbose:
                            print(f"seed {seed} passed in {time.monotonic() - t0:.2f}s", file=out)
                            print("\n".join(f"  {n}" for n in notes), file=out, flush=True)
                        if len(result.seeds_run) % 25 == 0:
                            rate = len(result.seeds_run) / (time.monotonic() - started)
                            print(
                                f"  {len(result.seeds_run)} seeds passed ({rate:.2f}/s)",
                                file=out,
                                flush=True,
                            )
                    final = judge.final()
                    if final.violations:
                        seed = _seed_of(rig, final.violations[0])
                        result.failure = SeedFailure(
                            seed,
                            schedule_of(seed) if seed >= 0 else None,
                            ["the batch-end check of the whole write log failed"],
                            final.violations,
                            rig.logs(),
                            stack.workdir,
                        )
                        print(result.failure.render(), file=out, flush=True)
                        return result
                    result.checks.update(final.checks)
                finally:
                    result.crashes.update(rig.crashes)
                    rig.close()
            if not keep:
                shutil.rmtree(bdir, ignore_errors=True)
    finally:
        result.wall = time.monotonic() - started
    return result


@contextmanager
def _cloud_stack(
    cloud: CloudName, workdir: Path, ledger_url: str | None
) -> Iterator[tuple[Stack, Cloud]]:
    """The stack without its web app, its executor writing to ``cloud``."""
    if cloud == "devcloud":
        env = Devcloud.executor_env
        with running_stack(workdir, webapp=False, ledger_url=ledger_url, executor_env=env) as st:
            yield st, Devcloud(st.devcloud)
        return
    workdir.mkdir(parents=True, exist_ok=True)
    with running_moto(workdir) as handle:
        handle.enforce_auth()
        world = Moto(handle)
        with running_stack(
            workdir / "stack",
            webapp=False,
            ledger_url=ledger_url,
            executor_env=world.executor_env,
            devcloud=False,
        ) as stack:
            yield stack, world


def _seed_of(rig: Rig, violation: str) -> int:
    """The seed whose resource a violation names (proposal ids are prop_sw<seed:07d>n<i>)."""
    for rid, target in rig.targets.items():
        if rid in violation:
            found = re.fullmatch(r"prop_sw(\d{7})n\d+", target.proposal_id)
            return int(found.group(1)) if found else -1
    return -1


@contextmanager
def _ledger(db: str, pg_admin_url: str) -> Iterator[str | None]:
    if db == "postgres":
        with _pg_database(pg_admin_url) as url:
            yield url
    else:
        yield None  # the stack's own SQLite ledger in its directory
