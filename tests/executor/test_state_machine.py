"""A Hypothesis state machine over the executor: execute, duplicate, crash at a point,
provider faults, advance the clock, recover, restart — checking after every step that
no approval is written twice, that ``succeeded`` means exactly one write, that terminal
rows never change, and (at the end of each run) that the audit chain verifies.

Crashes are simulated in-process: a failpoint raises SimulatedCrash and the worker is
abandoned mid-flight, exactly where a SIGKILL would leave it (every failpoint sits
between two transactions). ``test_crash.py`` does the same with real SIGKILLs.
"""

from __future__ import annotations

import itertools
from typing import Any

import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from airlock.store import verify_chain
from services.executor import FAILPOINTS, Failpoints
from services.executor.errors import SimulatedCrash
from services.executor.models import TERMINAL_STATES, State, ledger
from services.executor.recover import recover_expired

from .support import LEASE, TTL, FakeClock, InMemoryCloud, make_executor, make_test_bundle

_runs = itertools.count()
# (resource type, operation, precondition status) of the bundles each run may present.
_KINDS = [
    ("ecs.instance", "stop", "Running"),
    ("ecs.instance", "stop", "Running"),
    ("ecs.instance", "delete", "Stopped"),
    ("rds.instance", "stop", "Running"),
]


class ExecutorMachine(RuleBasedStateMachine):
    url: str = ""

    def __init__(self) -> None:
        super().__init__()
        run = next(_runs)
        self.tag = f"sm{run}"
        self.cloud = InMemoryCloud()
        self.clock = FakeClock()
        self.crash_at: str | None = None
        self.restarts = 0
        self.executors: list[Any] = []
        self.executor = self._new_executor()
        self.approvals = [
            make_test_bundle(n, tag=self.tag, resource_type=t, operation=op, status=s)
            for n, (t, op, s) in enumerate(_KINDS)
        ]
        for b, (t, _, s) in zip(self.approvals, _KINDS, strict=True):
            self.cloud.add(t, b.resource_id, status=s)
        self.presented: set[int] = set()
        self.terminal: dict[str, tuple[Any, ...]] = {}

    def _new_executor(self) -> Any:
        def crash(point: str) -> None:
            if point == self.crash_at:
                self.crash_at = None
                raise SimulatedCrash(point)

        executor = make_executor(
            self.url,
            self.cloud,
            self.clock,
            worker_id=f"{self.tag}-w{self.restarts}",
            failpoints=Failpoints(frozenset(FAILPOINTS), action=crash),
        )
        self.executors.append(executor)
        return executor

    def _present(self, i: int) -> None:
        self.presented.add(i)
        try:
            self.executor.execute(self.approvals[i].raw)
        except SimulatedCrash:
            # The worker died here: nothing after the failpoint ran. Its lease stays in
            # the ledger until it expires; the next "process" is a fresh executor.
            self.restart()

    @rule(i=st.integers(0, len(_KINDS) - 1))
    def execute(self, i: int) -> None:
        self._present(i)

    @precondition(lambda self: bool(self.presented))
    @rule(data=st.data())
    def duplicate(self, data: st.DataObject) -> None:
        self._present(data.draw(st.sampled_from(sorted(self.presented))))

    @rule(i=st.integers(0, len(_KINDS) - 1), point=st.sampled_from(FAILPOINTS))
    def crash_during(self, i: int, point: str) -> None:
        self.crash_at = point
        self._present(i)
        self.crash_at = None

    @rule(
        i=st.integers(0, len(_KINDS) - 1),
        fault=st.sampled_from(["timeout_after", "timeout_before", "refuse"]),
    )
    def provider_fault(self, i: int, fault: str) -> None:
        self.cloud.next_fault = fault
        self._present(i)
        self.cloud.next_fault = None

    @rule(i=st.integers(0, len(_KINDS) - 1))
    def someone_protects_or_restarts(self, i: int) -> None:
        b = self.approvals[i]
        key = (b.resource_type, b.resource_id)
        if key in self.cloud.instances:
            self.cloud.tag(b.resource_type, b.resource_id, "airlock:protect", "1")

    @rule(seconds=st.sampled_from([1, LEASE, TTL]))
    def advance_clock(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule()
    def recover(self) -> None:
        try:
            recover_expired(self.executor)
        except SimulatedCrash:
            self.restart()

    @rule()
    def restart(self) -> None:
        self.restarts += 1
        self.executor = self._new_executor()

    def _rows(self) -> dict[str, sa.RowMapping]:
        ids = [b.approval_id for b in self.approvals]
        with self.executor.engine.connect() as conn:
            rows = conn.execute(sa.select(ledger).where(ledger.c.approval_id.in_(ids)))
            return {r["approval_id"]: r for r in rows.mappings()}

    @invariant()
    def exactly_once(self) -> None:
        rows = self._rows()
        for b in self.approvals:
            writes = self.cloud.writes_for(b.resource_id)
            assert writes <= 1, f"{b.approval_id} written {writes} times"
            row = rows.get(b.approval_id)
            if row is None:
                assert writes == 0
                continue
            if row["state"] == State.SUCCEEDED:
                assert writes == 1, f"{b.approval_id} succeeded with {writes} writes"
            if row["state"] in (State.REFUSED, State.FAILED, State.CLAIMED):
                assert writes == 0, f"{b.approval_id} is {row['state']} after a write"

    @invariant()
    def terminal_rows_never_change(self) -> None:
        for approval_id, row in self._rows().items():
            snapshot = tuple(row.values())
            if approval_id in self.terminal:
                assert self.terminal[approval_id] == snapshot
            elif row["state"] in TERMINAL_STATES:
                self.terminal[approval_id] = snapshot

    def teardown(self) -> None:
        try:
            report = verify_chain(self.executor.engine)
            assert report.ok, report.fault
        finally:
            for executor in self.executors:
                executor.engine.dispose()


def test_executor_state_machine(migrated_url: str) -> None:
    ExecutorMachine.url = migrated_url
    run_state_machine_as_test(
        ExecutorMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            database=None,
        ),
    )
