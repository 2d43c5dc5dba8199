"""An approver's edit of a pending tool call, as one transaction of the lifecycle: the
old proposal withdrawn with ``superseded_by``, the edited call proposed anew under the
policy's fresh decision, the editor's vote, and the approval when it meets the quorum
(docs/protocol.md#editing-a-tool-call).

The pure part (the new call, its id, the record of what changed) is :mod:`.edits`; this
module is its database half and must never change a signed or stored call in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from airlock.events import CheckpointEvent
from airlock.protocol import TOOL_CALL_TYPE, ToolCall

from . import _tx, edits, routing, toolcalls, views
from .auth import Principal
from .errors import ErrorCode, Refusal
from .models import proposals, votes
from .policy import Decision
from .schemas import ProposalOut

if TYPE_CHECKING:
    from .service import Checkpoint

__all__ = ["edit"]


def edit(
    cp: Checkpoint,
    principal: Principal,
    proposal_id: str,
    seen_hash: str,
    values: Mapping[str, Any],
    *,
    confirm: str | None,
    note: str,
) -> ProposalOut:
    """Edit a pending tool call's arguments (docs/protocol.md#editing-a-tool-call): the
    answer is the new proposal, which supersedes the old one, with the editor's vote.

    One transaction: (1) the old one is a pending tool call, what the editor saw,
    not theirs; (2) the edited call (:mod:`.edits`) and the policy's decision on it;
    (3) its typed target if that decision asks; (4) the old one withdrawn with
    ``superseded_by``, the new one inserted, ``proposal.edited``; (5) the editor's
    vote, and the approval when it meets the quorum. The same edit sent again by the
    same person answers the proposal it made.

    Raises:
        Refusal: E_FORBIDDEN, E_NOT_FOUND, E_STATE (not a tool call, not pending),
            E_EXPIRED, E_STALE_VIEW, E_SELF_APPROVAL, E_INVALID (see
            :func:`.edits.edited_call`), E_POLICY_DENIED, E_CONFIRM_REQUIRED,
            E_CONFIRM_MISMATCH; nothing is written.
    """
    _tx.require(principal, _tx.APPROVER_ROLES, "edit")
    if principal.kind != "user":
        raise Refusal(ErrorCode.E_FORBIDDEN, "only people edit", 403)
    now = cp.now()
    with cp.engine.begin() as conn:
        row = _tx.lock(conn, proposal_id)
        if row.action_type != TOOL_CALL_TYPE:
            raise Refusal(ErrorCode.E_STATE, "only a tool call's arguments can be edited", 409)
        old = ToolCall.from_json_bytes(bytes(row.action))
        # (1)
        if row.superseded_by is not None:
            made = views.edit_made(
                conn, row, old, principal, cp.notify, seen_hash=seen_hash, values=values, now=now
            )
            if made is not None:
                return made
            raise Refusal(
                ErrorCode.E_STATE, f"the proposal was edited into {row.superseded_by}", 409
            )
        _tx.check_pending(row, now)
        if seen_hash != row.action_hash:
            raise Refusal(
                ErrorCode.E_STALE_VIEW,
                f"the action hash edited ({str(seen_hash)[:80]}) is not this proposal's "
                f"({row.action_hash}): nothing was edited; reload it and review again",
                409,
            )
        _tx.check_not_proposer(principal, row)
        routing.check_voter(conn, cp.policy.notify, row.id, principal.name)
        # (2)
        new_id, edited = edits.edited_call(old, values, now=now)
        decision = cp.policy.decide(edited.call)
        if decision.effect == "deny":
            raise Refusal(ErrorCode.E_POLICY_DENIED, _tx.deny_message(decision), 403)
        # (3)
        _tx.check_confirm(row, decision.confirm, confirm)
        # (4) and (5)
        issued = _supersede(
            cp,
            conn,
            row,
            principal,
            new_id=new_id,
            edited=edited,
            decision=decision,
            note=note,
            now=now,
        )
        result = views.view_by_id(conn, new_id, cp.notify, principal.name)
    if issued:
        cp.on_change()
    return result


def _supersede(
    cp: Checkpoint,
    conn: Connection,
    row: Any,
    principal: Principal,
    *,
    new_id: str,
    edited: edits.Edited,
    decision: Decision,
    note: str,
    now: int,
) -> bool:
    """Steps (4) and (5) of :meth:`edit`, in ``conn``; True when it issued the approval."""
    # (4) the old one leaves the open slot before the new one takes it
    done = conn.execute(
        proposals.update()
        .where(proposals.c.id == row.id, proposals.c.state == "pending")
        .values(state="withdrawn", superseded_by=new_id, updated_at=now)
    ).rowcount
    if done != 1:  # the row lock makes this unreachable; fail closed if it is not
        raise Refusal(ErrorCode.E_STATE, "the proposal changed concurrently", 409)
    record = edits.record(
        supersedes=row.id, by=principal.name, note=note, at=now, changes=edited.changes
    )
    cp._insert_proposal(
        conn,
        submitted_by=row.submitted_by,
        sub=toolcalls.tool_submission(edited.call, edited.canonical, edited.digest),
        decision=decision,
        now=now,
        edit=record,
    )
    _tx.audit(
        conn,
        now,
        CheckpointEvent.PROPOSAL_EDITED,
        proposal_id=row.id,
        new_proposal_id=new_id,
        by=principal.name,
        note=note,
        old_action_hash=row.action_hash,
        new_action_hash=edited.digest,
        changes=edited.changes,
        rule=decision.rule,
        effect=decision.effect,
        quorum=decision.quorum,
        policy_hash=cp.policy.hash,
    )
    # (5) the edited proposal may be routed to other groups
    routing.carry(conn, row.id, new_id)
    routing.check_voter(conn, cp.policy.notify, new_id, principal.name)
    conn.execute(votes.insert().values(proposal_id=new_id, voter=principal.name, at=now, note=note))
    _tx.audit(
        conn,
        now,
        CheckpointEvent.VOTE_APPROVE,
        proposal_id=new_id,
        action_hash=edited.digest,
        by=principal.name,
        note=note,
    )
    if decision.effect == "auto" or len(_tx.counted_votes(conn, new_id)) >= decision.quorum:
        cp._issue(conn, new_id, now)
        return True
    return False
