"""What an executor's refusal receipt may say as a note on a proposal. Not public.

A verified receipt is checked again here for what a note shows (its code, its
executor, its time); this module does no I/O and must never accept a code that an
executor does not report before the consume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from airlock.protocol import Receipt, RefusalCode

from . import _tx, views
from .errors import ErrorCode, Refusal

__all__ = ["RefusalNote", "refusal_note"]

#: The refusals an executor reports before the consume (the kernel's verify steps 6–8
#: and 12, which name the authenticated approval): the only codes a note may carry, so
#: nothing else (a signature refusal, a code made up) is ever shown on a proposal.
_NOTE_CODES: Final = frozenset(
    c.value
    for c in (
        RefusalCode.E_AUDIENCE,
        RefusalCode.E_ACCOUNT,
        RefusalCode.E_NOT_YET_VALID,
        RefusalCode.E_EXPIRED,
        RefusalCode.E_TTL,
        RefusalCode.E_REVOKED,
    )
)


@dataclass(frozen=True, slots=True)
class RefusalNote:
    """What a refusal receipt says, checked: exists only for a receipt fit to be a note."""

    approval_id: str
    action_hash: str | None
    refusal_code: str
    detail: str
    executor: str
    at: int


def refusal_note(payload: Receipt) -> RefusalNote:
    """The note a verified receipt makes, or refuse it (E_RECEIPT): what a note may say,
    beyond what a valid receipt says."""

    def refuse(why: str) -> Refusal:
        return Refusal(ErrorCode.E_RECEIPT, f"not a refusal receipt: {why}", 422)

    if payload.outcome != "refused":
        raise refuse("its outcome must be 'refused' (other outcomes go to /v1/outcomes)")
    code = payload.refusal_code
    if code is None or code not in _NOTE_CODES:
        raise refuse(
            "refusal_code must be one an executor reports before the consume: "
            + ", ".join(sorted(_NOTE_CODES))
        )
    if payload.approval_id is None:
        raise refuse("approval_id must name the approval (its signature verified)")
    executor = payload.executor
    # Not held to this checkpoint's audience, unlike an outcome: an executor configured
    # for another audience is what E_AUDIENCE reports, and the note changes nothing.
    if not 1 <= len(executor) <= _tx.EXECUTOR_MAX:
        raise refuse(f"executor must name the executor (1 to {_tx.EXECUTOR_MAX} characters)")
    if not executor.isprintable():
        raise refuse("executor must be printable text")
    if payload.at > _tx.AT_MAX:
        raise refuse("at must be the time of the refusal (Unix seconds, before the year 10000)")
    return RefusalNote(
        payload.approval_id,
        payload.action_hash,
        code,
        views.shown(payload.detail),
        executor,
        payload.at,
    )
