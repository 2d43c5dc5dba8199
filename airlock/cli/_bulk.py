"""``airlock approvals approve|reject ID ID…``: several proposals in one confirmation.

Each proposal is fetched and its action checked against its hash as for one
(``signed_action``); the selection must be of one operation and one risk and hold no
high-risk action (refused before anything is sent, ``E_BULK_MIXED`` / ``E_BULK_HIGH_RISK``).
One proposal that is no longer pending is named and left out. The person confirms once,
on a list of every id with its action hash and saving; then each proposal gets its own
request: an approve carries the hash that was listed (the checkpoint refuses any other,
``E_STALE_VIEW``), so every vote is bound to its hash and audited on its own. A proposal
the checkpoint refuses is named with its code; the others go through. The exit code is 0
when every one was decided, 1 when any was refused or left out, 3 when the checkpoint
stopped answering (what was not sent is named).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import typer

from ._approvals import _fetch, _pending_total, _signed_saving
from ._approvals_show import _saving_label, _when
from ._client import (
    CheckpointClient,
    CheckpointRefused,
    CheckpointUnavailable,
    ExitCode,
    LocalRefusal,
    handle_errors,
)
from ._text import inert, inert_json, say

if TYPE_CHECKING:
    from airlock.api import Proposal

__all__ = ["decide_many"]


@dataclass(frozen=True, slots=True)
class _Result:
    id: str
    action_hash: str | None
    #: approved | voted | rejected | refused | left_out | not_sent | unknown
    outcome: str
    code: str | None
    message: str


_DONE = frozenset({"approved", "voted", "rejected"})


def _high_risk(p: Proposal) -> bool:
    from airlock.protocol import HIGH_RISK_OPERATIONS

    return (
        p.risk == "high"
        or p.policy.confirm
        or (p.resource_type, p.operation) in HIGH_RISK_OPERATIONS
    )


def decide_many(
    proposal_ids: list[str], verb: str, payload: dict[str, Any], *, yes: bool, as_json: bool
) -> None:
    """Approve or reject (``verb``) each of ``proposal_ids`` after one confirmation."""
    ids = list(dict.fromkeys(proposal_ids))
    err = as_json  # with --json the listing goes to stderr; stdout is one JSON document
    results: list[_Result] = []
    with handle_errors(as_json=as_json):
        from ._proposal import signed_action
        from ._session import load_credentials

        with CheckpointClient.signed_in(load_credentials()) as client:
            chosen: list[Proposal] = []
            for proposal_id in ids:
                try:
                    p = _fetch(client, proposal_id)
                except CheckpointRefused as exc:
                    if exc.code == "E_UNAUTHENTICATED":
                        raise
                    results.append(_Result(proposal_id, None, "left_out", exc.code, exc.message))
                    continue
                signed_action(p)  # its text hashes to its hash and says what the record says
                if p.state != "pending":
                    results.append(
                        _Result(p.id, p.action_hash, "left_out", "E_STATE", f"it is {p.state}")
                    )
                elif p.is_tool_call:
                    raise LocalRefusal(
                        "E_BULK_TOOL_CALL",
                        f"{p.id} is a tool call: decide it alone; nothing was sent",
                    )
                elif _high_risk(p):
                    raise LocalRefusal(
                        "E_BULK_HIGH_RISK",
                        f"{p.id} is high risk ({p.operation}): decide it alone; nothing was sent",
                    )
                else:
                    chosen.append(p)
            kinds = sorted({(p.operation, p.risk) for p in chosen})
            if len(kinds) > 1:
                raise LocalRefusal(
                    "E_BULK_MIXED",
                    "the proposals are of several operations or risks ("
                    + ", ".join(f"{op} {risk}" for op, risk in kinds)
                    + "); decide one kind at a time; nothing was sent",
                )
            _listing(chosen, results, verb, err=err)
            if chosen:
                _confirm(len(chosen), verb, yes=yes)
            stop: str | None = None
            for p in chosen:
                if stop is not None:
                    results.append(_Result(p.id, p.action_hash, "not_sent", None, stop))
                    continue
                try:
                    results.append(_send(client, p, verb, payload))
                except CheckpointRefused as exc:
                    results.append(_Result(p.id, p.action_hash, "refused", exc.code, exc.message))
                    if exc.code == "E_UNAUTHENTICATED":
                        stop = "not sent: the session ended (run `airlock login`)"
                except CheckpointUnavailable as exc:
                    results.append(
                        _Result(
                            p.id,
                            p.action_hash,
                            "unknown",
                            None,
                            f"no answer ({exc}); `airlock approvals show {p.id}` tells",
                        )
                    )
                    stop = "not sent: the checkpoint stopped answering"
    _report(results, verb, as_json=as_json)
    if any(r.outcome in ("unknown", "not_sent") for r in results):
        raise typer.Exit(ExitCode.UNAVAILABLE)
    if any(r.outcome not in _DONE for r in results):
        raise typer.Exit(ExitCode.REFUSED)


def _send(client: CheckpointClient, p: Proposal, verb: str, payload: dict[str, Any]) -> _Result:
    from airlock.api import Proposal as _Proposal

    from ._proposal import parse

    # An approve carries the hash the person confirmed: the checkpoint refuses any other
    # (E_STALE_VIEW). A proposal id names one action for good, so a reject names it too.
    body = {"action_hash": p.action_hash, **payload} if verb == "approve" else dict(payload)
    after: Proposal = parse(
        _Proposal, client.call("POST", f"/v1/proposals/{p.id}/{verb}", json=body)
    )
    if verb == "reject":
        return _Result(p.id, p.action_hash, "rejected", None, f"state {after.state}")
    if after.state == "approved" and after.approval is not None:
        return _Result(
            p.id,
            p.action_hash,
            "approved",
            None,
            f"signed approval {after.approval.approval_id} valid until "
            f"{_when(after.approval.expires_at)}",
        )
    return _Result(
        p.id, p.action_hash, "voted", None, f"vote recorded; {after.votes_needed} more needed"
    )


def _listing(chosen: list[Proposal], left_out: list[_Result], verb: str, *, err: bool) -> None:
    for r in left_out:
        say(f"left out  {r.id}: {r.code}: {inert(r.message)}", err=err)
    if not chosen:
        say(f"nothing to {verb}", err=err)
        return
    op, risk = chosen[0].operation, chosen[0].risk
    say(f"{verb} {len(chosen)} {risk}-risk {op} proposal(s), each for the hash shown:", err=err)
    for p in chosen:
        say(
            f"  {p.id}  {inert(p.resource_id)}  {_saving_label(_signed_saving(p))}  "
            f"{p.action_hash}",
            err=err,
        )
    total = _pending_total(chosen)
    if total:
        say(total.replace("pending on this page", "in this decision"), err=err)


def _confirm(count: int, verb: str, *, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        typer.echo(f"error: no terminal to ask on: pass --yes to {verb} these {count}", err=True)
        raise typer.Exit(ExitCode.USAGE)
    if not typer.confirm(f"{verb.capitalize()} these {count}, each for its hash?", err=True):
        typer.echo(f"not {verb}d; nothing was sent", err=True)
        raise typer.Exit(ExitCode.REFUSED)


def _report(results: list[_Result], verb: str, *, as_json: bool) -> None:
    if as_json:
        typer.echo(inert_json({"results": [asdict(r) for r in results]}))
        return
    for r in results:
        if r.outcome in _DONE:
            say(f"{r.outcome:<9} {r.id}: {inert(r.message)} ({r.action_hash})")
        else:
            code = f"{r.code}: " if r.code else ""
            say(f"{r.outcome:<9} {r.id}: {code}{inert(r.message)}", err=True)
    done = sum(1 for r in results if r.outcome in _DONE)
    say(f"{verb}: {done} of {len(results)} decided")
