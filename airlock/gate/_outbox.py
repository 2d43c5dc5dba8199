"""The gate's outbox: deliver the receipts it recorded to the checkpoint.

A receipt is queued in the transaction that records it (``executor_outbox``) and leaves
the queue in the one that records its delivery (``executor_deliveries``): delivered, or
rejected for good. What the checkpoint cannot take now stays queued for the next
:meth:`Outbox.deliver`. Never changes a ledger row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from airlock import ledger

from ._checkpoint import CheckpointClient
from .errors import Error

__all__ = ["Outbox"]

_log = logging.getLogger("airlock.gate")

#: Answers to a receipt that say "not now" rather than "never".
_NOT_NOW: Final = frozenset({408, 425, 429})


class Outbox:
    """Delivers one gate's queued receipts (see the module docstring)."""

    def __init__(self, engine: Engine, client: CheckpointClient, clock: Callable[[], int]) -> None:
        self._engine = engine
        self._client = client
        self._clock = clock

    def deliver(self, approval_id: str | None = None) -> int:
        """Send every undelivered receipt to the checkpoint; return how many it took.

        A receipt the checkpoint refuses for good (a 4xx) is recorded ``rejected`` and
        leaves the outbox; one it cannot take now (no answer, 408, 425, 429, 5xx) stays.
        At least once: two processes may both send a receipt the outbox holds; the
        checkpoint takes the same receipt again as it took it first.

        With ``approval_id``, only that approval's receipts.

        Raises:
            Unavailable: the checkpoint did not answer (what was delivered stays so).
        """
        query = sa.select(ledger.outbox).order_by(ledger.outbox.c.queued_at).limit(500)
        if approval_id is not None:
            query = query.where(ledger.outbox.c.approval_id == approval_id)
        with self._engine.connect() as conn:
            queued = conn.execute(query).all()
        delivered = 0
        for kind, queued_id, _queued_at, attempt in queued:
            text = self._stored_receipt(kind, queued_id)
            if text is None:
                continue
            answer = self._client.report(kind, text)
            if answer.ok:
                status = "delivered"
                delivered += 1
            elif answer.status in _NOT_NOW or answer.status >= 500:
                continue
            else:
                status = "rejected"
                _log.warning(
                    "the checkpoint refused the %s receipt of %s: %s",
                    kind,
                    queued_id,
                    answer.error_code(),
                )
            with self._engine.begin() as conn:
                conn.execute(
                    ledger.insert_ignore(conn, ledger.deliveries).values(
                        kind=kind,
                        approval_id=queued_id,
                        status=status,
                        http_status=answer.status,
                        error_code=None if answer.ok else answer.error_code(),
                        detail="",
                        at=self._clock(),
                        attempt=attempt,
                    )
                )
                conn.execute(
                    sa.delete(ledger.outbox).where(
                        ledger.outbox.c.kind == kind,
                        ledger.outbox.c.approval_id == queued_id,
                        ledger.outbox.c.attempt == attempt,
                    )
                )
        return delivered

    def _stored_receipt(self, kind: str, approval_id: str) -> str | None:
        with self._engine.connect() as conn:
            if kind == "outcome":
                row = ledger.get(conn, approval_id)
                return None if row is None else row.receipt
            if kind == "resolution":
                found = conn.execute(
                    sa.select(ledger.resolutions.c.receipt).where(
                        ledger.resolutions.c.approval_id == approval_id
                    )
                ).scalar()
                return None if found is None else str(found)
            found = conn.execute(
                sa.select(ledger.refusals.c.receipt).where(
                    ledger.refusals.c.id == ledger.reportable_refusal(sa.literal(approval_id))
                )
            ).scalar()
            return None if found is None else str(found)

    def deliver_quietly(self, approval_id: str | None = None) -> None:
        # After the commit, best effort: the outbox keeps what is not delivered, and
        # deliver() or recover() sends it again. A call sends its own receipts only.
        try:
            self.deliver(approval_id)
        except Error as exc:
            _log.warning("receipts left in the outbox: %s", exc)
