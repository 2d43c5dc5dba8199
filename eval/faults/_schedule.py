"""Seeded fault schedules: what one seed of the sweep does, as data (no I/O here).

A schedule is a list of proposals (targets) and a sequence of steps: ``approve`` a target
(as the approvers, through the API) or ``fault`` (inject one fault). The same seed always
gives the same schedule; the timing of the running system is not seeded, which is the
point of running many seeds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final, Literal

from services.executor.failpoints import FAILPOINTS, FEED_FAILPOINTS

__all__ = [
    "ALL_FAILPOINTS",
    "FAULT_KINDS",
    "Fault",
    "Schedule",
    "Step",
    "Target",
    "make_schedule",
]

#: Every named crash point of the executor: the execute path's and the feed side's.
ALL_FAILPOINTS: Final = (*FAILPOINTS, *FEED_FAILPOINTS)

#: kind -> weight. ``postgres.cut`` is drawn only when the ledger is on PostgreSQL,
#: ``devcloud.*`` only against devcloud.
FAULT_KINDS: Final = {
    "executor.failpoint": 4,  # restart the executor armed at a named point; it dies there
    "executor.sigkill": 2,  # SIGKILL the executor 0-80 ms after whatever came before
    "devcloud.fail": 2,  # the next writes fail before any effect (5xx or throttling)
    "devcloud.drop": 3,  # the next write applies, then its answer is withheld or cut
    "devcloud.latency": 1,  # every write is slowed (sometimes past the read timeout)
    "checkpoint.restart": 2,  # SIGKILL (or SIGTERM) the checkpoint and start it again
    "postgres.cut": 2,  # pg_terminate_backend on every ledger connection, 0-40 ms in
    "drift": 1,  # the target changes out of band before its approval
}

_FAIL_KINDS: Final = ("unavailable", "internal", "throttling")
_DROP_MODES: Final = ("timeout", "reset")
#: 1500 ms is past the executor's 700 ms read timeout in the sweep (see _rig.py).
_WRITE_LATENCIES_MS: Final = (20, 100, 300, 1500)
_DRIFTS: Final = ("status", "protect", "gone")
_BEFORE_AN_APPROVAL: Final = frozenset(
    {"executor.failpoint", "devcloud.fail", "devcloud.drop", "devcloud.latency"}
)


@dataclass(frozen=True, slots=True)
class Target:
    """One proposal of the seed, on a resource created for it alone (devcloud's named
    ``resource_id``; moto names its own, see :mod:`._clouds`)."""

    index: int
    operation: Literal["stop", "delete"]
    resource_id: str
    proposal_id: str

    @property
    def initial_status(self) -> str:
        # stop wants a running instance; delete one already stopped
        # (docs/architecture.md#staged-clean-up)
        return "Running" if self.operation == "stop" else "Stopped"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    arg: str = ""  # failpoint, fail kind, drop mode, signal, drift kind
    n: int = 0  # count, delay or latency in milliseconds
    target: int = -1  # drift: which target

    @property
    def label(self) -> str:
        """The summary's bucket: the kind and, where it matters, its variant."""
        if self.kind in ("executor.failpoint", "devcloud.fail", "devcloud.drop", "drift"):
            return f"{self.kind}:{self.arg}"
        if self.kind == "checkpoint.restart":
            return f"{self.kind}:{self.arg}"
        return self.kind

    def describe(self) -> str:
        parts = [self.kind]
        if self.arg:
            parts.append(self.arg)
        if self.n:
            parts.append(f"n={self.n}")
        if self.target >= 0:
            parts.append(f"target={self.target}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Step:
    kind: Literal["approve", "fault"]
    target: int = -1
    fault: Fault | None = None

    def describe(self) -> str:
        if self.kind == "approve":
            return f"approve target {self.target}"
        assert self.fault is not None
        return f"fault {self.fault.describe()}"


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    targets: tuple[Target, ...]
    steps: tuple[Step, ...]
    faults: tuple[Fault, ...] = field(init=False)

    def __post_init__(self) -> None:
        faults = tuple(s.fault for s in self.steps if s.fault is not None)
        object.__setattr__(self, "faults", faults)

    def describe(self) -> str:
        lines = [f"seed {self.seed}:"]
        for t in self.targets:
            lines.append(f"  target {t.index}: {t.operation} {t.resource_id} ({t.proposal_id})")
        for i, step in enumerate(self.steps):
            lines.append(f"  step {i}: {step.describe()}")
        return "\n".join(lines)


def _draw_fault(rng: random.Random, *, postgres: bool, moto: bool, targets: int) -> Fault:
    kinds = [
        k
        for k in FAULT_KINDS
        if (postgres or k != "postgres.cut") and not (moto and k.startswith("devcloud."))
    ]
    kind = rng.choices(kinds, weights=[FAULT_KINDS[k] for k in kinds])[0]
    match kind:
        case "executor.failpoint":
            return Fault(kind, rng.choice(ALL_FAILPOINTS))
        case "executor.sigkill":
            return Fault(kind, n=rng.randint(0, 80))
        case "devcloud.fail":
            return Fault(kind, rng.choice(_FAIL_KINDS), n=rng.randint(1, 2))
        case "devcloud.drop":
            return Fault(kind, rng.choice(_DROP_MODES), n=1)
        case "devcloud.latency":
            return Fault(kind, n=rng.choice(_WRITE_LATENCIES_MS))
        case "checkpoint.restart":
            return Fault(kind, "SIGKILL" if rng.random() < 0.75 else "SIGTERM")
        case "postgres.cut":
            return Fault(kind, n=rng.randint(0, 40))
        case "drift":
            return Fault(kind, rng.choice(_DRIFTS), target=rng.randrange(targets))
    raise AssertionError(f"unhandled fault kind {kind}")


def make_schedule(
    seed: int,
    *,
    postgres: bool = False,
    approvals: tuple[int, int] = (2, 4),
    faults: tuple[int, int] = (1, 3),
    cloud: Literal["devcloud", "moto"] = "devcloud",
) -> Schedule:
    """The schedule of ``seed``: ``approvals`` and ``faults`` are inclusive ranges. Against
    moto, which cannot fail a write on demand, no ``devcloud.*`` fault is drawn."""
    # random.Random, not secrets: a schedule must be reproducible from its seed.
    rng = random.Random(seed)
    count = rng.randint(*approvals)
    targets = tuple(
        Target(
            index=i,
            operation="delete" if rng.random() < 0.3 else "stop",
            resource_id=f"i-sw{seed:07d}n{i}",
            proposal_id=f"prop_sw{seed:07d}n{i}",
        )
        for i in range(count)
    )
    steps = [Step("approve", target=i) for i in range(count)]
    for _ in range(rng.randint(*faults)):
        fault = _draw_fault(rng, postgres=postgres, moto=cloud == "moto", targets=count)
        step = Step("fault", fault=fault)
        if fault.kind == "drift":
            # Out of band, before the approval: the executor's re-read must catch it.
            at = next(
                i for i, s in enumerate(steps) if s.kind == "approve" and s.target == fault.target
            )
            steps.insert(at, step)
        elif fault.kind in _BEFORE_AN_APPROVAL:
            # A fault that waits for the next write or the next item must have one coming.
            last = max(i for i, s in enumerate(steps) if s.kind == "approve")
            steps.insert(rng.randint(0, last), step)
        else:
            steps.insert(rng.randint(0, len(steps)), step)
    return Schedule(seed, targets, tuple(steps))
