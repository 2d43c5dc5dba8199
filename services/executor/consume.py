"""(13) What a consume writes: the ledger row an approval is consumed into, and its event.

The execute path consumes an approval once, in the one commit before the write
(docs/protocol.md#ledger): the row is born ``executing`` (the write follows), ``refused``
(the live state failed the precondition) or, when the live state could not be read,
``claimed`` with its lease ended, for recovery to continue. :class:`Consume` carries what
every one of those transactions needs; :func:`ledger_row` and :func:`consumed_event`
build the row and the ``executor.consumed`` event from the verified approval only.

Nothing here touches the database or decides anything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from airlock.events import ExecutorEvent
from airlock.protocol import VerifiedApproval

from .models import State, Work

__all__ = ["Consume", "RecordAlso", "bundle_sha", "consumed_event", "ledger_row"]

#: Called with the connection of the transaction that records what became of a bundle,
#: before its audit event is appended (the feed's cursor moves there); gives the fields
#: that event also carries (the checkpoint's head, when the feed has one to record).
RecordAlso = Callable[[Connection], Mapping[str, object]]


@dataclass(frozen=True, slots=True)
class Consume:
    """One verified bundle on its way to the ledger, leased to ``work.owner``."""

    verified: VerifiedApproval
    raw: bytes
    work: Work
    also: RecordAlso

    @property
    def bundle_sha(self) -> str:
        """``"sha256:" + hex(SHA-256(raw))``: what a refusal's record names the bundle by."""
        return bundle_sha(self.raw)


def bundle_sha(raw: bytes) -> str:
    """``"sha256:" + hex(SHA-256(raw))``, hashed when a refusal is recorded: an execution
    that is not refused records no digest of its bundle (its ledger row holds the bundle)."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def ledger_row(
    consume: Consume,
    state: State,
    *,
    now: int,
    lease_expires: int,
    refusal_code: str | None = None,
    detail: str = "",
    receipt: str | None = None,
) -> dict[str, object]:
    """(13) The ledger row a consume inserts, born in ``state``."""
    verified, work = consume.verified, consume.work
    st = verified.statement
    return {
        "approval_id": st.approval_id,
        "nonce": st.nonce,
        "action_hash": verified.action_hash,
        "proposal_id": st.proposal_id,
        "resource_type": st.resource.type,
        "resource_id": st.resource.id,
        "region": st.region,
        "operation": st.operation,
        "action": verified.action_bytes,
        "bundle": consume.raw,
        "keyid": verified.keyid,
        "expires_at": st.expires_at,
        "state": state.value,
        "lease_owner": work.owner,
        "lease_epoch": work.epoch,
        "lease_expires": lease_expires,
        "claimed_at": now,
        "updated_at": now,
        "refusal_code": refusal_code,
        "cloud_request_id": None,
        "verified": False,
        "detail": detail,
        "receipt": receipt,
        "effect_key": None,  # a cloud action has no effect key (migration 0011)
    }


def consumed_event(
    verified: VerifiedApproval,
    work: Work,
    also: Mapping[str, object],
    *,
    call: str | None = None,
) -> dict[str, object]:
    """The ``executor.consumed`` event: what ``airlock audit reconcile`` compares with the
    approval the checkpoint issued under the same id, with the fields ``also`` gives.

    With ``call``, the consume is straight into ``executing`` and the event says so
    (``state``, ``call``): one row records both, where a row consumed into ``claimed``
    is followed by an ``executor.executing`` event of its own when it gets there.
    """
    st = verified.statement
    event: dict[str, object] = {
        "type": ExecutorEvent.CONSUMED,
        "approval_id": st.approval_id,
        "action_hash": verified.action_hash,
        "nonce": st.nonce,
        "proposal_id": st.proposal_id,
        "resource": {"type": st.resource.type, "id": st.resource.id},
        "region": st.region,
        "operation": st.operation,
        "keyid": verified.keyid,
        "approvers": [a.id for a in st.approvers],
        "owner": work.owner,
        "epoch": work.epoch,
    }
    if call is not None:
        event["state"] = State.EXECUTING.value
        event["call"] = call
    event.update(also)
    return event
