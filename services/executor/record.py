"""(16) Record: each outcome or refusal, its audit event and its signed receipt, at once.

:class:`Recorder` writes what the execute path, recovery and a person's resolution
decide: an outcome commits with its audit event and receipt in one transaction,
conditional on still holding the lease (:meth:`Recorder.finish`), and a refusal with its
event and receipt, queued for the checkpoint when it must hear of it
(:meth:`Recorder.refusal`). It never calls the cloud and decides nothing about an
approval.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Final, Literal

from sqlalchemy.engine import Connection

from airlock import ledger
from airlock.events import ExecutorEvent
from airlock.protocol import (
    RECEIPT_PAYLOAD_TYPE,
    Binding,
    Envelope,
    RefusalCode,
    b64encode,
    canonical_bytes,
)
from airlock.store import AuditEntry, AuditLog

from .consume import Consume, RecordAlso, consumed_event, ledger_row
from .errors import LedgerHeld
from .failpoints import Failpoints
from .models import Outcome, State, Work
from .receipts import RECEIPT_TYPE, AuditHead, Receipt, ReceiptSigner, Resolution
from .sources import OutcomeSink
from .transactions import Transactions

__all__ = ["DETAIL_MAX", "Recorder", "clip", "envelope_text"]

_log = logging.getLogger("airlock.executor")

#: The longest detail recorded (ledger row, audit event, receipt).
DETAIL_MAX: Final = 2000


def _at(now: int) -> datetime:
    return datetime.fromtimestamp(now, UTC)


#: A key id as :func:`~airlock.protocol.key_id` writes it: no character to escape.
_PLAIN_KEYID: Final = re.compile(r"ed25519:[0-9a-f]{32}")


def envelope_text(envelope: Envelope) -> str:
    """The envelope as the ledger stores it: its RFC 8785 JSON text."""
    signatures = envelope.signatures
    if (
        envelope.payload_type == RECEIPT_PAYLOAD_TYPE
        and len(signatures) == 1
        and _PLAIN_KEYID.fullmatch(signatures[0].keyid)
    ):
        # A receipt as ReceiptSigner signs it: base64, a fixed payload type and a key id,
        # none holding a character to escape, in RFC 8785's member order (payload <
        # payloadType < signatures, keyid < sig); written directly, every receipt.
        return (
            f'{{"payload":"{b64encode(envelope.payload)}",'
            f'"payloadType":"{RECEIPT_PAYLOAD_TYPE}",'
            f'"signatures":[{{"keyid":"{signatures[0].keyid}",'
            f'"sig":"{b64encode(signatures[0].sig)}"}}]}}'
        )
    return canonical_bytes(envelope.to_value()).decode("utf-8")


def clip(text: str) -> str:
    """``text`` cut to :data:`DETAIL_MAX` characters."""
    return text if len(text) <= DETAIL_MAX else text[: DETAIL_MAX - 1] + "…"


_REVOKED_AT_CONSUME: Final = "revoked before the write (seen at the consume)"
_EXPIRED_AT_CONSUME: Final = "expired before the write (seen at the consume)"


class _NotConsumed(Exception):
    """The consume into ``refused`` inserted nothing: roll its events back."""


def _outcome_event(
    work: Work,
    state: State,
    code: RefusalCode | None,
    *,
    request_id: str | None,
    verified: bool,
    detail: str,
) -> dict[str, object]:
    return {
        "type": ExecutorEvent.OUTCOME,
        "approval_id": work.approval_id,
        "action_hash": work.action_hash,
        "state": state.value,
        "refusal_code": None if code is None else code.value,
        "cloud_request_id": request_id,
        "verified": verified,
        "detail": detail,
        "owner": work.owner,
        "epoch": work.epoch,
    }


class Recorder:
    """Writes outcomes, refusals and receipts for one executor (see the module docstring).

    Args: the ledger's ``transactions``, the receipt ``signer``, the executor's ``binding`` (its
    audience names the receipts; its skew bounds which refusals are reported), the
    ``clock``, ``failpoints`` (tests) and an optional ``sink`` told of each outcome.
    """

    def __init__(
        self,
        *,
        transactions: Transactions,
        signer: ReceiptSigner,
        binding: Binding,
        clock: Callable[[], int],
        failpoints: Failpoints,
        sink: OutcomeSink | None,
    ) -> None:
        self._tx = transactions
        self._signer = signer
        self._binding = binding
        self._clock = clock
        self._fp = failpoints
        self._sink = sink

    def audit(
        self, conn: Connection, now: int, event: Mapping[str, object], *, lane: bool = False
    ) -> AuditEntry:
        """Append ``event`` to the audit chain in ``conn``'s transaction, at ``now``; with
        ``lane``, in a lane of its own where the transaction holds no lock yet."""
        return AuditLog.append(conn, event, at=_at(now), lane=lane)

    def receipt(
        self,
        head: AuditEntry,
        now: int,
        *,
        approval_id: str | None,
        action_hash: str | None,
        outcome: Literal["succeeded", "failed", "in_doubt", "refused", "resolved"],
        code: RefusalCode | None = None,
        request_id: str | None = None,
        verified: bool = False,
        detail: str = "",
        resolution: Resolution | None = None,
    ) -> Envelope:
        """The signed receipt of an outcome, naming the audit row ``head`` that records it."""
        return self._signer.sign(
            Receipt(
                type=RECEIPT_TYPE,
                executor=self._binding.audience,
                approval_id=approval_id,
                action_hash=action_hash,
                outcome=outcome,
                verified=verified,
                refusal_code=None if code is None else code.value,
                cloud_request_id=request_id,
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
        code: RefusalCode,
        detail: str,
        bundle_sha: str,
        *,
        approval_id: str | None = None,
        action_hash: str | None = None,
        issued_at: int | None = None,
        also: RecordAlso | None = None,
    ) -> Envelope:
        """Record a refusal in ``conn``'s transaction (refusals table, audit event with
        the fields ``also(conn)`` adds, signed receipt) and queue it for the checkpoint
        when it must hear of it; return the receipt. ``also`` is called under the whole
        chain's lock, which a feed's acknowledgement (a lane) must come after."""
        detail = clip(detail)
        # The checkpoint hears of an approval refused before it was used
        # (docs/protocol.md#proposals: it would show approved, then lapsed, with no reason): the
        # first such refusal of an authenticated approval this ledger never consumed is queued for
        # the outbox in this transaction. A replay is not (its ledger row reports its own outcome),
        # nor an approval consumed here and presented again once expired (E_EXPIRED, not
        # E_REPLAY: steps 6–8 come first), which may well have been written. Decided
        # under the chain lock, which every consume and every refusal is recorded under.
        AuditLog.lock(conn)
        report = (
            approval_id is not None
            and code is not RefusalCode.E_REPLAY
            and ledger.refusal_to_report(conn, approval_id)
        )
        event: dict[str, object] = {
            "type": ExecutorEvent.REFUSED,
            "code": code.value,
            "detail": detail,
            "approval_id": approval_id,
            "action_hash": action_hash,
            "bundle_sha256": bundle_sha,
        }
        # Nor one this ledger may have used and forgotten (migration 0007: a note must
        # never say an approval went unused that was). A ledger hold means the ledger
        # went back and lost rows consumed before the hold's `since`; an approval is
        # consumed no earlier than `not_before - skew >= issued_at - skew`. So one with
        # `issued_at - skew < since` of any hold ever recorded (ended ones too: a hold
        # ends the wait, not the gap), or whose issue time is unknown, is not reported;
        # the refusal is recorded as every one is, its event saying why.
        if report:
            since = ledger.forgotten_before(conn)
            if since is not None and (issued_at is None or issued_at - self._binding.skew < since):
                report = False
                event["not_reported"] = (
                    f"this ledger went back before {since} (a ledger hold) and may have "
                    "used this approval, issued before it, and forgotten"
                )
        if also is not None:
            event.update(also(conn))
        head = self.audit(conn, now, event)
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
                "code": code.value,
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

    def not_consumed(
        self,
        conn: Connection,
        consume: Consume,
        now: int,
        code: RefusalCode | None = None,
        detail: str = "",
    ) -> Outcome:
        """Record, in ``conn``'s transaction, why ``consume``'s approval is not consumed:
        ``code`` and ``detail`` when given (expired or revoked before the consume), else
        what :func:`~airlock.ledger.why_not_consumed` finds (a replay, a revocation
        recorded, expiry). Raises :class:`LedgerHeld` (the transaction rolls back:
        nothing is recorded) while a ledger hold is in force."""
        verified = consume.verified
        st = verified.statement
        short = detail
        if code is None:
            row = ledger_row(consume, State.EXECUTING, now=now, lease_expires=now)
            why = ledger.why_not_consumed(conn, row, now=now)
            if why == "held":
                until = ledger.held_until(conn)
                raise LedgerHeld(now if until is None else until)
            code, detail, short = {
                "taken": (
                    RefusalCode.E_REPLAY,
                    f"approval {st.approval_id} (or its nonce or action) was already used",
                    "already used",
                ),
                "revoked": (RefusalCode.E_REVOKED, _REVOKED_AT_CONSUME, _REVOKED_AT_CONSUME),
                "expired": (RefusalCode.E_EXPIRED, _EXPIRED_AT_CONSUME, _EXPIRED_AT_CONSUME),
            }[why]
        receipt = self.refusal(
            conn,
            now,
            code,
            detail,
            consume.bundle_sha,
            approval_id=st.approval_id,
            action_hash=verified.action_hash,
            issued_at=st.issued_at,
            also=consume.also,
        )
        return Outcome(st.approval_id, None, code, detail=clip(short), receipt=receipt)

    def consume_refused(self, consume: Consume, code: RefusalCode, detail: str) -> Outcome:
        """Consume ``consume``'s approval straight into ``refused`` (the live state fails
        its precondition): the row, its events and its receipt in one transaction, the
        receipt queued. When the INSERT inserts nothing, records why instead
        (:meth:`not_consumed`) in a transaction of its own."""
        work = consume.work
        now = self._clock()
        detail = clip(detail)
        try:
            with self._tx.begin() as conn:
                AuditLog.lock(conn)
                if ledger.revoked(conn, work.approval_id):
                    raise _NotConsumed  # refused as revoked (not_consumed asks why)
                self.audit(conn, now, consumed_event(consume.verified, work, consume.also(conn)))
                head = self.audit(
                    conn,
                    now,
                    _outcome_event(
                        work, State.REFUSED, code, request_id=None, verified=False, detail=detail
                    ),
                )
                receipt = self.receipt(
                    head,
                    now,
                    approval_id=work.approval_id,
                    action_hash=work.action_hash,
                    outcome="refused",
                    code=code,
                    detail=detail,
                )
                row = ledger_row(
                    consume,
                    State.REFUSED,
                    now=now,
                    lease_expires=now,
                    refusal_code=code.value,
                    detail=detail,
                    receipt=envelope_text(receipt),
                )
                if not ledger.consume(conn, row, now=now):
                    raise _NotConsumed  # rolls the events back
                ledger.queue_receipt(conn, kind="outcome", approval_id=work.approval_id, now=now)
        except _NotConsumed:
            with self._tx.begin() as conn:
                AuditLog.lock(conn)
                return self.not_consumed(conn, consume, now)
        return Outcome(work.approval_id, State.REFUSED, code, None, False, detail, receipt)

    def finish(
        self,
        work: Work,
        from_state: State,
        to_state: State,
        *,
        code: RefusalCode | None = None,
        request_id: str | None = None,
        verified: bool = False,
        detail: str = "",
    ) -> Outcome:
        """(16) Outcome, audit event and receipt in one transaction, if we still hold it."""
        now = self._clock()
        detail = clip(detail)
        with self._tx.begin() as conn:
            # A lane, not the whole chain: outcomes of concurrent executions commit
            # together. The row is fenced by its lease (owner, epoch), not by this lock.
            # Taken by the append, the first statement (one round trip for both).
            head = self.audit(
                conn,
                now,
                _outcome_event(
                    work, to_state, code, request_id=request_id, verified=verified, detail=detail
                ),
                lane=True,
            )
            receipt = self.receipt(
                head,
                now,
                approval_id=work.approval_id,
                action_hash=work.action_hash,
                outcome=to_state.value,  # type: ignore[arg-type]  # terminal states only
                code=code,
                request_id=request_id,
                verified=verified,
                detail=detail,
            )
            # Conditional on (approval_id, state, owner, epoch): if another worker took
            # the lease over, this raises Fenced and the audit event rolls back with it.
            ledger.transition(
                conn,
                approval_id=work.approval_id,
                owner=work.owner,
                epoch=work.epoch,
                from_state=from_state,
                to_state=to_state,
                now=now,
                refusal_code=None if code is None else code.value,
                cloud_request_id=request_id,
                verified=verified,
                detail=detail,
                receipt=envelope_text(receipt),
                queue=True,  # its receipt for the outbox, in the same statement
            )
        self._fp.hit("after_outcome_commit")
        return self.report(
            Outcome(work.approval_id, to_state, code, request_id, verified, detail, receipt)
        )

    def report(self, outcome: Outcome) -> Outcome:
        """Tell the sink of ``outcome`` (best effort: the ledger is the truth); return it."""
        if self._sink is not None:
            try:
                self._sink.report(outcome)
            except Exception:  # the ledger is the truth; reporting is best effort
                _log.exception("reporting the outcome of %s failed", outcome.approval_id)
        return outcome
