"""The executor's tables and the values that travel between its modules.

The tables are the ledger's (:mod:`airlock.ledger`, docs/protocol.md#ledger), shared with
a gate and named here for the executor's modules; :class:`Outcome` is the executor's
own: what happened to one bundle, and :class:`Work` a row one worker holds the lease on.
Nothing in this module reads a clock or talks to the cloud.
"""

from __future__ import annotations

from dataclasses import dataclass

from airlock.ledger import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    LedgerRow,
    State,
    checkpoint_head,
    deliveries,
    feed_cursor,
    ledger,
    ledger_holds,
    metadata,
    outbox,
    refusals,
    resends,
    resolutions,
    revocations,
)
from airlock.protocol import Envelope, ProposedAction, RefusalCode

__all__ = [
    "ACTIVE_STATES",
    "TERMINAL_STATES",
    "LedgerRow",
    "Outcome",
    "State",
    "Work",
    "checkpoint_head",
    "deliveries",
    "feed_cursor",
    "ledger",
    "ledger_holds",
    "metadata",
    "outbox",
    "refusals",
    "resends",
    "resolutions",
    "revocations",
]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one bundle, as far as this call took it.

    ``state`` is None for a bundle refused before it became a ledger row (steps 1–13);
    an active state (claimed/executing) means the work stopped short and recovery will
    finish it. ``receipt`` is set exactly when the outcome is terminal.
    """

    approval_id: str | None
    state: State | None
    refusal_code: RefusalCode | None = None
    cloud_request_id: str | None = None
    verified: bool = False
    detail: str = ""
    receipt: Envelope | None = None

    @property
    def terminal(self) -> bool:
        return self.state is None or self.state in TERMINAL_STATES


@dataclass(frozen=True, slots=True)
class Work:
    """One ledger row this worker holds the lease on, with its authenticated action."""

    approval_id: str
    action_hash: str
    action: ProposedAction
    expires_at: int
    owner: str
    epoch: int

    @classmethod
    def from_row(cls, row: LedgerRow, *, owner: str, epoch: int) -> Work:
        # The bytes were authenticated (hash-checked against a verified signature) when
        # they were consumed; the ledger is the executor's own trusted store.
        return cls(
            approval_id=row.approval_id,
            action_hash=row.action_hash,
            action=ProposedAction.from_json_bytes(row.action),
            expires_at=row.expires_at,
            owner=owner,
            epoch=epoch,
        )
