"""What an operator does with a gate: recover interrupted calls, resolve an in_doubt
one, read the ledger's counts (docs/gate.md#recovery).

Never calls a guarded function: recovery asks the guard's ``lookup`` or leaves the call
``in_doubt`` for a person.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Literal, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from airlock import ledger
from airlock.events import ExecutorEvent
from airlock.ledger import Fenced, LedgerRow, State
from airlock.protocol import KeySet, Resolution, ToolBinding, verify_bundle
from airlock.protocol import Refused as ProtocolRefused
from airlock.store import AuditLog

from ._call import Guard
from ._outbox import Outbox
from ._record import Recorder, Work, ask, envelope_text
from .errors import GateCode, Refused

__all__ = ["Operator", "Settled", "Status"]

_log = logging.getLogger("airlock.gate")


class Settled(NamedTuple):
    """What :meth:`Gate.recover` did with one interrupted call."""

    approval_id: str
    effect_key: str | None
    state: str
    code: str | None


class Status(NamedTuple):
    """:meth:`Gate.status`: ledger rows per state, and receipts not yet delivered."""

    states: Mapping[str, int]
    undelivered: int


class Operator:
    """Recovery, resolution and status over one gate's ledger."""

    def __init__(
        self,
        *,
        engine: Engine,
        recorder: Recorder,
        keys: KeySet,
        binding: ToolBinding,
        guards: Mapping[str, Guard],
        clock: Callable[[], int],
        worker_id: str,
        lease_seconds: int,
        outbox: Outbox,
    ) -> None:
        self._engine = engine
        self._rec = recorder
        self._keys = keys
        self._binding = binding
        self._guards = guards
        self._clock = clock
        self.worker_id = worker_id
        self._lease_seconds = lease_seconds
        self._outbox = outbox

    def status(self) -> Status:
        """Ledger rows per state, and how many receipts are not delivered yet."""
        with self._engine.connect() as conn:
            counted = conn.execute(
                sa.select(ledger.ledger.c.state, sa.func.count()).group_by(ledger.ledger.c.state)
            ).all()
            undelivered = conn.execute(sa.select(sa.func.count()).select_from(ledger.outbox))
            count = int(undelivered.scalar() or 0)
        return Status({str(k): int(v) for k, v in counted}, count)

    def recover(self, limit: int = 100) -> list[Settled]:
        """Settle calls whose process stopped (expired leases), verify-first; never call.

        ``claimed`` (nothing was called) → ``refused``: ``E_INTERRUPTED``, or the code
        the stored bundle is refused with today. ``executing`` (the call may have
        happened) → the guard's ``lookup`` decides ``succeeded`` or ``failed``; without a
        lookup (no guard of that tool registered on this gate, or none given), or when it
        fails, ``in_doubt``. Then undelivered receipts are sent.
        """
        now = self._clock()
        with self._engine.connect() as conn:
            rows = ledger.expired(conn, now, limit)
        settled: list[Settled] = []
        for row in rows:
            if row.resource_type != ledger.TOOL_CALL_RESOURCE_TYPE:
                continue  # a cloud action's row is the executor's, sharing this database
            work = self._take_over(row)
            if work is None:
                continue
            refusal = self._reverify(row)
            if row.state is State.CLAIMED:
                code = GateCode.E_INTERRUPTED.value if refusal is None else refusal.code.value
                detail = (
                    "the process stopped before the call; nothing was called"
                    if refusal is None
                    else f"re-verified: {refusal.detail}"
                )
                to_state, verified = State.REFUSED, False
            else:
                why = "recovered: the process stopped during the call"
                if refusal is not None:
                    why += f" (the bundle no longer verifies: {refusal.code.value})"
                guard = self._guards.get(row.operation)
                to_state, verified, detail = ask(
                    None if guard is None else guard.lookup, work.effect_key, why
                )
                code = None
            try:
                self._rec.finish(
                    work,
                    row.state,
                    to_state,
                    self._clock(),
                    code=code,
                    verified=verified,
                    detail=detail,
                )
            except Fenced as exc:
                _log.warning("%s", exc)
                continue
            settled.append(Settled(row.approval_id, row.effect_key, to_state.value, code))
        self._outbox.deliver_quietly()
        return settled

    def _take_over(self, row: LedgerRow) -> Work | None:
        now = self._clock()
        with self._engine.begin() as conn:
            AuditLog.lock(conn)
            if not ledger.take_over(
                conn,
                row,
                owner=self.worker_id,
                now=now,
                lease_expires=now + self._lease_seconds,
            ):
                return None
            self._rec.audit(
                conn,
                now,
                {
                    "type": ExecutorEvent.LEASE_TAKEN_OVER,
                    "approval_id": row.approval_id,
                    "state": row.state.value,
                    "owner": self.worker_id,
                    "epoch": row.lease_epoch + 1,
                    "from_owner": row.lease_owner,
                    "from_epoch": row.lease_epoch,
                },
            )
        return Work(
            row.approval_id,
            row.action_hash,
            row.effect_key or "",
            row.proposal_id,
            self.worker_id,
            row.lease_epoch + 1,
        )

    def _reverify(self, row: LedgerRow) -> ProtocolRefused | None:
        try:
            verify_bundle(row.bundle, self._keys, self._binding, self._clock())
        except ProtocolRefused as exc:
            return exc
        return None

    def resolve(
        self,
        approval_id: str,
        decision: Literal["happened", "did_not_happen"],
        by: str,
        note: str = "",
    ) -> None:
        """Record a person's decision on an ``in_doubt`` call, with a signed receipt.

        Raises:
            Refused: ``E_INVALID`` (decision, who, note), ``E_NOT_FOUND``,
                ``E_NOT_IN_DOUBT`` or ``E_ALREADY_RESOLVED``; recorded in the audit
                chain too (``executor.resolution_refused``).
        """
        try:
            self._resolve(approval_id, decision, by, note)
        except Refused as exc:
            with self._engine.begin() as conn:
                self._rec.audit(
                    conn,
                    self._clock(),
                    {
                        "type": ExecutorEvent.RESOLUTION_REFUSED,
                        "approval_id": str(approval_id)[:200],
                        "decision": str(decision)[:32],
                        "by": str(by)[:128],
                        "code": exc.code,
                        "detail": exc.detail,
                    },
                )
            raise
        self._outbox.deliver_quietly()

    def _resolve(self, approval_id: str, decision: str, by: str, note: str) -> None:
        by = by.strip() if isinstance(by, str) else ""
        if decision not in ("happened", "did_not_happen") or not by or len(by) > 128:
            raise Refused(GateCode.E_INVALID, "decision is happened or did_not_happen, by a name")
        if not isinstance(note, str) or len(note) > 2000:
            raise Refused(GateCode.E_INVALID, "the note is text of at most 2000 characters")
        now = self._clock()
        resolution = Resolution(decision=decision, by=by, at=now, note=note)  # type: ignore[arg-type]
        with self._engine.begin() as conn:
            AuditLog.lock(conn)
            row = ledger.get(conn, approval_id)
            if row is None:
                raise Refused(GateCode.E_NOT_FOUND, f"no ledger row for {approval_id}")
            if row.state is not State.IN_DOUBT:
                raise Refused(GateCode.E_NOT_IN_DOUBT, f"{approval_id} is {row.state.value}")
            head = self._rec.audit(
                conn,
                now,
                {
                    "type": ExecutorEvent.RESOLVED,
                    "approval_id": approval_id,
                    "action_hash": row.action_hash,
                    "decision": decision,
                    "by": by,
                    "note": note,
                },
            )
            receipt = self._rec.receipt(
                head,
                now,
                approval_id=approval_id,
                action_hash=row.action_hash,
                outcome="resolved",
                detail=f"in_doubt resolved by {by}: {decision}",
                resolution=resolution,
            )
            if not ledger.insert_resolution(
                conn,
                {
                    "approval_id": approval_id,
                    "decision": decision,
                    "decided_by": by,
                    "decided_at": now,
                    "note": note,
                    "receipt": envelope_text(receipt),
                },
            ):
                raise Refused(GateCode.E_ALREADY_RESOLVED, f"{approval_id} was already resolved")
            ledger.queue_receipt(conn, kind="resolution", approval_id=approval_id, now=now)
