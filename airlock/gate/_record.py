"""Record what the gate decides: each refusal and outcome with its audit event and signed
receipt, in one transaction; queue the receipts the checkpoint must hear of.

The audit chain is the ledger database's own (``audit_log``, chain ``executor``), with the
executor's vocabulary (:class:`airlock.events.ExecutorEvent`): a gate is an executor in
miniature, and reads as one to ``airlock audit verify`` and ``airlock reconcile``. Never
calls the guarded function and decides nothing about an approval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Final, Literal, NamedTuple

from sqlalchemy.engine import Connection, Engine

from airlock import ledger
from airlock.events import ExecutorEvent
from airlock.ledger import State
from airlock.protocol import (
    RECEIPT_TYPE,
    AuditHead,
    Envelope,
    Receipt,
    Resolution,
    canonical_bytes,
)
from airlock.store import AuditEntry, AuditLog

from ._receipts import ReceiptSigner

__all__ = ["DETAIL_MAX", "Recorder", "Work", "ask", "clip", "envelope_text"]

#: The longest detail recorded (ledger row, audit event, receipt).
DETAIL_MAX: Final = 2000

Outcome = Literal["succeeded", "failed", "in_doubt", "refused", "resolved"]


def clip(text: str) -> str:
    return text if len(text) <= DETAIL_MAX else text[: DETAIL_MAX - 1] + "…"


def envelope_text(envelope: Envelope) -> str:
    """The envelope as the ledger stores it: its RFC 8785 JSON text."""
    return canonical_bytes(envelope.to_value()).decode("utf-8")


class Work(NamedTuple):
    """A ledger row this process holds: which approval, under which lease."""

    approval_id: str
    action_hash: str
    effect_key: str
    proposal_id: str
    owner: str
    epoch: int


class Recorder:
    """Writes refusals, outcomes and receipts for one gate (see the module docstring)."""

    def __init__(self, engine: Engine, signer: ReceiptSigner, audience: str) -> None:
        self._engine = engine
        self._signer = signer
        self._audience = audience

    def audit(self, conn: Connection, now: int, event: Mapping[str, object]) -> AuditEntry:
        """Append ``event`` to the chain in ``conn``'s transaction, at ``now``."""
        return AuditLog.append(conn, event, at=datetime.fromtimestamp(now, UTC))

    def receipt(
        self,
        head: AuditEntry,
        now: int,
        *,
        approval_id: str | None,
        action_hash: str | None,
        outcome: Outcome,
        code: str | None = None,
        verified: bool = False,
        detail: str = "",
        resolution: Resolution | None = None,
    ) -> Envelope:
        """The signed receipt of an outcome, naming the audit row ``head`` that records it."""
        return self._signer.sign(
            Receipt(
                type=RECEIPT_TYPE,
                executor=self._audience,
                approval_id=approval_id,
                action_hash=action_hash,
                outcome=outcome,
                verified=verified,
                refusal_code=code,
                cloud_request_id=None,
                resolution=resolution,
                at=now,
                audit_head=AuditHead(seq=head.seq, hash=head.row_hash),
                detail=clip(detail),
            )
        )

    def refusal(
        self,
        conn: Connection,
        now: int,
        code: str,
        detail: str,
        bundle_sha: str,
        *,
        approval_id: str | None = None,
        action_hash: str | None = None,
    ) -> Envelope:
        """Record a refusal of a bundle that did not become a ledger row, in ``conn``'s
        transaction (refusals row, audit event, signed receipt), and queue its receipt
        when the checkpoint must hear of it: the first refusal, not a replay, of an
        authenticated approval this ledger never consumed."""
        detail = clip(detail)
        AuditLog.lock(conn)  # the chain lock before deciding, as every consume takes it
        report = (
            approval_id is not None
            and code != "E_REPLAY"
            and ledger.refusal_to_report(conn, approval_id)
        )
        head = self.audit(
            conn,
            now,
            {
                "type": ExecutorEvent.REFUSED,
                "code": code,
                "detail": detail,
                "approval_id": approval_id,
                "action_hash": action_hash,
                "bundle_sha256": bundle_sha,
            },
        )
        receipt = self.receipt(
            head,
            now,
            approval_id=approval_id,
            action_hash=action_hash,
            outcome="refused",
            code=code,
            detail=detail,
        )
        ledger.insert_refusal(
            conn,
            {
                "at": now,
                "code": code,
                "detail": detail,
                "approval_id": approval_id,
                "action_hash": action_hash,
                "bundle_sha256": bundle_sha,
                "receipt": envelope_text(receipt),
            },
        )
        if report and approval_id is not None:
            ledger.queue_receipt(conn, kind="refusal", approval_id=approval_id, now=now)
        return receipt

    def finish(
        self,
        work: Work,
        from_state: State,
        to_state: State,
        now: int,
        *,
        code: str | None = None,
        verified: bool = False,
        detail: str = "",
    ) -> Envelope:
        """Outcome, audit event and receipt in one transaction, if this process still
        holds the row (else :class:`airlock.ledger.Fenced`, and nothing is written)."""
        detail = clip(detail)
        with self._engine.begin() as conn:
            AuditLog.lock(conn)  # the chain lock before the row lock, as everywhere
            head = self.audit(
                conn,
                now,
                {
                    "type": ExecutorEvent.OUTCOME,
                    "approval_id": work.approval_id,
                    "action_hash": work.action_hash,
                    "state": to_state.value,
                    "refusal_code": code,
                    "cloud_request_id": None,
                    "verified": verified,
                    "detail": detail,
                    "owner": work.owner,
                    "epoch": work.epoch,
                },
            )
            receipt = self.receipt(
                head,
                now,
                approval_id=work.approval_id,
                action_hash=work.action_hash,
                outcome=to_state.value,  # type: ignore[arg-type]  # terminal states only
                code=code,
                verified=verified,
                detail=detail,
            )
            ledger.transition(
                conn,
                approval_id=work.approval_id,
                owner=work.owner,
                epoch=work.epoch,
                from_state=from_state,
                to_state=to_state,
                now=now,
                refusal_code=code,
                verified=verified,
                detail=detail,
                receipt=envelope_text(receipt),
                queue=True,  # its receipt for the outbox, in the same statement
            )
        return receipt


def ask(lookup: Callable[[str], bool] | None, effect_key: str, why: str) -> tuple[State, bool, str]:
    """Did the effect happen? ``lookup`` says; without one, or if it fails, in_doubt."""
    if lookup is None:
        return State.IN_DOUBT, False, f"{why}; no lookup to ask: a person resolves it"
    try:
        happened: object = lookup(effect_key)
    except Exception as exc:
        return State.IN_DOUBT, False, f"{why}; the lookup raised {type(exc).__name__}"
    if happened is True:
        return State.SUCCEEDED, True, f"{why}; the lookup found the effect"
    if happened is False:
        return State.FAILED, True, f"{why}; the lookup found no effect"
    return State.IN_DOUBT, False, f"{why}; the lookup answered {type(happened).__name__}"
