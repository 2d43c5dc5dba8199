"""Reading the two audit chains for :func:`airlock.reconcile.reconcile`. Not public.

:func:`scan` verifies an export line by line and hands each verified row to a collector:
:class:`CheckpointChain` keeps what the checkpoint issued, revoked, let lapse, recorded
from receipts and resolved; :class:`ExecutorChain` keeps what the executor consumed,
wrote, finished, resolved, and the checkpoint heads it recorded. Nothing is judged here
(that is :mod:`airlock.reconcile`), and nothing is written.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from airlock.events import CheckpointEvent, ExecutorEvent
from airlock.store import GENESIS_TYPE, ChainReport, verify_export

__all__ = [
    "OUTCOME",
    "REFUSED",
    "RESOLVED",
    "CheckpointChain",
    "CheckpointHead",
    "ExecutorChain",
    "ExecutorResolutionNote",
    "OutcomeReport",
    "ReceiptRow",
    "RefusalNote",
    "scan",
]

# Checkpoint events read here (airlock.events).
_ISSUED: Final = CheckpointEvent.APPROVAL_ISSUED
_REVOKED: Final = CheckpointEvent.APPROVAL_REVOKED
_LAPSED: Final = CheckpointEvent.APPROVAL_LAPSED
_REPORTED: Final = CheckpointEvent.OUTCOME_REPORTED
_REFUSAL_NOTE: Final = CheckpointEvent.EXECUTOR_REFUSAL
_PERSON_RESOLVED: Final = CheckpointEvent.EXECUTION_RESOLVED  # names the proposal only
_EXECUTOR_RESOLUTION: Final = CheckpointEvent.EXECUTOR_RESOLUTION  # after a person's
# Executor events read here.
_CONSUMED: Final = ExecutorEvent.CONSUMED
_EXECUTING: Final = ExecutorEvent.EXECUTING
OUTCOME: Final = ExecutorEvent.OUTCOME
RESOLVED: Final = ExecutorEvent.RESOLVED
REFUSED: Final = ExecutorEvent.REFUSED
_CHECKPOINT_HEAD: Final = ExecutorEvent.CHECKPOINT_HEAD
#: The field of a consume's or a refusal's event that records a checkpoint head.
_ANCHORED: Final = "checkpoint_head"
_ANCHORING_EVENTS: Final = frozenset({_CONSUMED, REFUSED})
#: The ``state`` of a consumed event whose consume went straight into ``executing``.
_STATE_EXECUTING: Final = "executing"
#: Executor events a receipt's audit head may point at: the receipt is signed over the
#: head right after the event that records it is appended.
_RECEIPT_EVENTS: Final = frozenset({OUTCOME, RESOLVED, REFUSED})


@dataclass(frozen=True, slots=True)
class Issued:
    action_hash: object
    nonce: object
    keyid: object
    approvers: object


@dataclass(frozen=True, slots=True)
class OutcomeReport:
    seq: int
    approval_id: str
    outcome: object
    head: object


@dataclass(frozen=True, slots=True)
class RefusalNote:
    seq: int
    approval_id: str
    refusal_code: object
    head: object


@dataclass(frozen=True, slots=True)
class PersonResolution:
    seq: int
    decision: object
    by: object


@dataclass(frozen=True, slots=True)
class ExecutorResolutionNote:
    seq: int
    approval_id: str
    decision: object
    head: object


@dataclass(frozen=True, slots=True)
class ReceiptRow:
    row_hash: str
    event: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CheckpointHead:
    seq: int  # the executor row that recorded it
    event: dict[str, Any]


@dataclass
class CheckpointChain:
    #: The rows whose hash an executor.checkpoint_head names (only those are kept).
    wanted: frozenset[int] = frozenset()
    issued: dict[str, Issued] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    lapsed: set[str] = field(default_factory=set)
    reports: list[OutcomeReport] = field(default_factory=list)
    refusals: list[RefusalNote] = field(default_factory=list)
    #: A person's resolution at the checkpoint, by approval (via the proposal's issue).
    person_resolved: dict[str, PersonResolution] = field(default_factory=dict)
    executor_resolutions: list[ExecutorResolutionNote] = field(default_factory=list)
    row_hashes: dict[int, str] = field(default_factory=dict)
    last_seq: int = -1
    _approval_of: dict[str, str] = field(default_factory=dict)  # proposal id → approval id

    def take(self, seq: int, row_hash: str, event: dict[str, Any]) -> None:
        self.last_seq = seq
        if seq in self.wanted:
            self.row_hashes[seq] = row_hash
        kind = event.get("type")
        if kind == _PERSON_RESOLVED:
            # The event names the proposal; its approval was issued before (one per
            # proposal: UNIQUE approvals.proposal_id).
            resolved = self._approval_of.get(str(event.get("proposal_id")))
            if resolved is not None:
                self.person_resolved[resolved] = PersonResolution(
                    seq, event.get("decision"), event.get("by")
                )
            return
        aid = event.get("approval_id")
        if not isinstance(aid, str):
            return
        if event.get("gate") is not None:
            # A gate's report of a tool call: its receipt names the gate's own chain, and
            # the executor never sees a tool call, so there is nothing here to hold it to.
            return
        if kind == _ISSUED:
            if isinstance(event.get("proposal_id"), str):
                self._approval_of[event["proposal_id"]] = aid
            self.issued[aid] = Issued(
                event.get("action_hash"),
                event.get("nonce"),
                event.get("keyid"),
                event.get("approvers"),
            )
        elif kind == _REVOKED:
            self.revoked.add(aid)
        elif kind == _LAPSED:
            self.lapsed.add(aid)
        elif kind == _REPORTED:
            self.reports.append(
                OutcomeReport(seq, aid, event.get("outcome"), event.get("executor_head"))
            )
        elif kind == _REFUSAL_NOTE:
            self.refusals.append(
                RefusalNote(seq, aid, event.get("refusal_code"), event.get("executor_head"))
            )
        elif kind == _EXECUTOR_RESOLUTION:
            self.executor_resolutions.append(
                ExecutorResolutionNote(seq, aid, event.get("decision"), event.get("executor_head"))
            )


@dataclass
class ExecutorChain:
    consumed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    writes: Counter[str] = field(default_factory=Counter)
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    resolved: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    receipt_rows: dict[int, ReceiptRow] = field(default_factory=dict)
    write_before_consume: list[str] = field(default_factory=list)
    checkpoint_heads: list[CheckpointHead] = field(default_factory=list)
    last_seq: int = -1

    def take(self, seq: int, row_hash: str, event: dict[str, Any]) -> None:
        self.last_seq = seq
        kind = event.get("type")
        if kind in _RECEIPT_EVENTS:
            self.receipt_rows[seq] = ReceiptRow(row_hash, event)
        elif kind == _CHECKPOINT_HEAD:
            self.checkpoint_heads.append(CheckpointHead(seq, event))
        # A feed page's head recorded with what became of its first approval (the
        # transaction's one event carries it), read as an executor.checkpoint_head.
        anchored = event.get(_ANCHORED) if kind in _ANCHORING_EVENTS else None
        if isinstance(anchored, dict):
            self.checkpoint_heads.append(CheckpointHead(seq, {**anchored, "at": event.get("at")}))
        aid = event.get("approval_id")
        if not isinstance(aid, str):
            return
        if kind == _CONSUMED:
            self.consumed.setdefault(aid, []).append(event)
            if event.get("state") == _STATE_EXECUTING:  # consumed straight into executing
                self.writes[aid] += 1
        elif kind == _EXECUTING:
            if aid not in self.consumed:
                self.write_before_consume.append(aid)
            self.writes[aid] += 1
        elif kind == OUTCOME:
            self.outcomes[aid] = event
        elif kind == RESOLVED:
            self.resolved[aid] = (seq, event)


def scan(
    lines: Iterable[str], take: Callable[[int, str, dict[str, Any]], None]
) -> tuple[ChainReport, str | None]:
    """Verify an export and feed every verified row to ``take``; the report, and the
    name of the chain its genesis row gives."""
    names: list[str] = []

    def verified_lines() -> Iterator[str]:
        pending: str | None = None
        for line in lines:
            # A line reaches ``take`` only once the verifier asked for the next one,
            # that is after it checked this one.
            if pending is not None:
                _take_line(pending)
            yield line
            pending = line
        if pending is not None:
            _take_line(pending)

    def _take_line(line: str) -> None:
        record = json.loads(line)
        event = record["event"]
        if record["seq"] == 0 and event.get("type") == GENESIS_TYPE:
            names.append(str(event.get("chain")))
        take(record["seq"], record["row_hash"], event)

    report = verify_export(verified_lines())
    return report, (names[0] if names else None)
