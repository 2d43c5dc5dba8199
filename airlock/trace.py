"""One action's story in the audit chains: ``airlock audit trace``.

Given a proposal id or an approval id, every event the checkpoint's and the executor's
chains hold about it, merged in time order: submitted, voted, issued, consumed,
``executing``, the outcome, its receipt recorded at the checkpoint, a person's
resolution, a revocation or a lapse.

Pure: it reads export lines (:func:`airlock.store.export`, or an export file) of chains
the caller has verified from genesis, in two passes over each. The first finds which ids
belong together: an approval names its proposal where it is issued and where it is
consumed, so a proposal's approvals (a revoked one, then a second) and an approval's
proposal are both found; a tool call edited into a new proposal (``proposal.edited``)
belongs with it. The second keeps the events that name one of those ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from airlock.events import CheckpointEvent
from airlock.protocol import APPROVAL_ID_PATTERN

__all__ = ["ID_PATTERN", "Trace", "TracedEvent", "trace"]

#: What may be traced: a proposal id or an approval id, as the protocol writes them.
ID_PATTERN: Final = re.compile(r"^(prop_[A-Za-z0-9_-]{8,80}|" + APPROVAL_ID_PATTERN[1:-1] + r")$")


@dataclass(frozen=True, slots=True)
class TracedEvent:
    """One row of one chain."""

    chain: str
    seq: int
    row_hash: str
    event: Mapping[str, Any]

    @property
    def at(self) -> str:
        at = self.event.get("at")
        return at if isinstance(at, str) else ""

    def to_value(self) -> dict[str, Any]:
        return {"chain": self.chain, "seq": self.seq, "row_hash": self.row_hash, **self.event}


@dataclass(slots=True)
class Trace:
    """The ids that belong together, and their events in time order."""

    asked: str
    proposals: list[str] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)
    events: list[TracedEvent] = field(default_factory=list)

    def to_value(self) -> dict[str, Any]:
        return {
            "id": self.asked,
            "proposals": self.proposals,
            "approvals": self.approvals,
            "events": [e.to_value() for e in self.events],
        }


_EDITED: Final = CheckpointEvent.PROPOSAL_EDITED.value


def _records(lines: Iterable[str]) -> Iterator[tuple[int, str, Mapping[str, Any]]]:
    for line in lines:
        record = json.loads(line)  # a verified chain's export: every line is JSON
        event = record.get("event")
        if isinstance(event, dict):
            yield int(record["seq"]), str(record["row_hash"]), event


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def trace(asked: str, chains: Mapping[str, Callable[[], Iterable[str]]]) -> Trace:
    """The events of ``chains`` (name → a fresh iterator over its export lines, called
    twice; ``checkpoint`` and ``executor``) that name ``asked`` or an id linked to it,
    merged in time order, each chain's events in their own order."""
    if not ID_PATTERN.fullmatch(asked):
        raise ValueError("an id is a proposal id (prop_…) or an approval id (apv_…)")
    # Pass 1: the (proposal, approval) pairs, few (one per issue and per consume).
    # And the (old, new) pairs of edits: a tool call edited into a new proposal is one story.
    links: set[tuple[str, str]] = set()
    edits: set[tuple[str, str]] = set()
    for lines in chains.values():
        for _, _, event in _records(lines()):
            pid, aid = _text(event.get("proposal_id")), _text(event.get("approval_id"))
            if pid is not None and aid is not None:
                links.add((pid, aid))
            new = _text(event.get("new_proposal_id"))
            if pid is not None and new is not None and event.get("type") == _EDITED:
                edits.add((pid, new))
    proposals = {asked} if asked.startswith("prop_") else set()
    approvals = {asked} if asked.startswith("apv_") else set()
    grown = True
    while grown:  # an approval's proposal, then that proposal's other approvals
        before = len(proposals) + len(approvals)
        for pid, aid in links:
            if pid in proposals or aid in approvals:
                proposals.add(pid)
                approvals.add(aid)
        for old, new in edits:
            if old in proposals or new in proposals:
                proposals.update((old, new))
        grown = len(proposals) + len(approvals) > before
    # Pass 2: the events naming one of them, each chain's in its own order.
    streams: list[list[TracedEvent]] = []
    for name, lines in chains.items():
        stream = []
        for seq, row_hash, event in _records(lines()):
            pid, aid = _text(event.get("proposal_id")), _text(event.get("approval_id"))
            if pid in proposals or aid in approvals:
                stream.append(TracedEvent(name, seq, row_hash, event))
        streams.append(stream)
    return Trace(asked, sorted(proposals), sorted(approvals), _merged(streams))


#: Checkpoint events that record what the executor did: within one second (the chains'
#: resolution), they come after the executor's own events, and the checkpoint's other
#: events (submitted, voted, issued...) before them.
_AFTER_THE_EXECUTOR: Final = frozenset(
    {
        CheckpointEvent.OUTCOME_REPORTED,
        CheckpointEvent.EXECUTION_RESOLVED,
        CheckpointEvent.EXECUTOR_RESOLUTION,  # an executor's resolution after a person's
        CheckpointEvent.APPROVAL_LAPSED,
    }
)


def _phase(e: TracedEvent) -> int:
    if e.chain != "checkpoint":
        return 1
    return 2 if e.event.get("type") in _AFTER_THE_EXECUTOR else 0


def _merged(streams: list[list[TracedEvent]]) -> list[TracedEvent]:
    """One list in time order that keeps each chain's own order (a merge, not a sort)."""
    heads = [0] * len(streams)
    out: list[TracedEvent] = []
    while True:
        ready = [i for i, s in enumerate(streams) if heads[i] < len(s)]
        if not ready:
            return out
        i = min(ready, key=lambda i: (streams[i][heads[i]].at, _phase(streams[i][heads[i]]), i))
        out.append(streams[i][heads[i]])
        heads[i] += 1
