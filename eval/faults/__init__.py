"""The whole-stack fault sweep: seeded random fault schedules over the running system.

``python -m eval.faults --seeds N [--start S] [--db sqlite|postgres]`` starts devcloud,
the checkpoint and the executor daemon as real processes on loopback (once per batch of
seeds), and for each seed submits a few proposals as the agent, approves them as people
through the API, and injects faults at random points of a seeded schedule: the executor
SIGKILLed at a named failpoint or at a random moment, devcloud failing, throttling,
applying-then-dropping its answer, or slowing writes, the checkpoint restarted, the
executor's PostgreSQL connections cut, the target changed out of band. After each seed
it waits (bounded, polling recorded state) until every approval has ended and checks the
invariants of :mod:`eval.faults._check`: at most one write per approval by devcloud's
write log, no approval silently lost, both audit chains verify, every receipt verifies.
With ``--cloud moto`` the executor writes to a moto server instead, judged by moto's
record of the write requests it received, and no devcloud fault is drawn
(:mod:`eval.faults._clouds`).

The sweep only uses the doors an operator has (APIs, signals, a superuser connection);
it never edits a service's code or database, and never judges exactly-once by the
executor's own word.
"""

from ._check import Issued, Judge, NotQuiescent, Verdict
from ._schedule import FAULT_KINDS, Fault, Schedule, Step, Target, make_schedule
from ._sweep import SeedFailure, SweepResult, run_sweep

__all__ = [
    "FAULT_KINDS",
    "Fault",
    "Issued",
    "Judge",
    "NotQuiescent",
    "Schedule",
    "SeedFailure",
    "Step",
    "SweepResult",
    "Target",
    "Verdict",
    "make_schedule",
    "run_sweep",
]
