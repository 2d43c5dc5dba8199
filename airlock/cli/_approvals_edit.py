"""``airlock approvals edit``: change a pending tool call's arguments, as the signed-in person.

Nothing signed changes in place: the checkpoint makes a new proposal with the new values
(a new id and hash) that supersedes the old one, which it withdraws, and counts this
person's approve vote on the new one; the policy decides the new one afresh (an edit that
raises an amount may need a second person). What is edited is what was shown: the
proposal is fetched, its signed text checked against its hash, the changes printed from
that text, and that hash sent back (``E_STALE_VIEW`` otherwise).
docs/protocol.md#editing-a-tool-call.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._approvals import JsonFlag, NoteOpt, _ask, _check_id, _fetch, _print_json
from ._approvals_show import _echo_lines, _summary, _votes
from ._client import CheckpointClient, ExitCode, LocalRefusal, handle_errors
from ._text import inert, say

if TYPE_CHECKING:
    from airlock.api import Proposal as _Proposal

__all__ = ["edit_command", "parse_set"]

#: The most arguments one edit may set (the checkpoint's EditIn takes no more).
_MAX_SET = 64


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    return False


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_set(pairs: list[str]) -> dict[str, Any]:
    """``--set NAME=VALUE`` options as a name → value map: VALUE as JSON when it parses
    (``15`` → 15, ``'"15"'`` → "15", ``true``, ``null``, ``[1,2]``), else as a string.
    Exits 2 on a pair without ``=``, an empty or repeated name, or a number with a
    fraction (signed values carry integers only)."""
    values: dict[str, Any] = {}
    for pair in pairs:
        name, eq, text = pair.partition("=")
        if not eq or not name:
            typer.echo(f"error: --set {inert(pair, limit=40)!r} is not NAME=VALUE", err=True)
            raise typer.Exit(ExitCode.USAGE)
        if name in values:
            typer.echo(f"error: --set names {inert(name, limit=40)!r} twice", err=True)
            raise typer.Exit(ExitCode.USAGE)
        try:
            value = json.loads(text, parse_constant=_refuse_constant)
        except ValueError:
            value = text
        if _has_float(value):
            typer.echo(
                f"error: --set {inert(name, limit=40)}: {inert(text, limit=40)} is not an "
                "integer; to send it as text, quote it as JSON ('\"1.5\"')",
                err=True,
            )
            raise typer.Exit(ExitCode.USAGE)
        values[name] = value
    if not 1 <= len(values) <= _MAX_SET:
        typer.echo(f"error: give 1 to {_MAX_SET} --set NAME=VALUE", err=True)
        raise typer.Exit(ExitCode.USAGE)
    return values


def _json(value: Any) -> str:
    return inert(json.dumps(value, ensure_ascii=False, separators=(",", ":")), limit=200)


def edit_command(
    proposal_id: Annotated[str, typer.Argument(metavar="ID", help="The tool call (prop_…).")],
    *,
    pairs: Annotated[
        list[str],
        typer.Option(
            "--set",
            metavar="NAME=VALUE",
            help="An argument's new value, as JSON when it parses (15, true, '\"15\"'), else "
            "as text; it keeps the argument's type. Repeat for several.",
        ),
    ],
    note: NoteOpt = "",
    confirm: Annotated[
        str | None,
        typer.Option(
            "--confirm",
            metavar="TARGET",
            help="The tool call's target, when the policy asks it typed (high risk).",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask before editing (not high risk).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Edit a pending tool call's arguments: a new proposal with your approve vote on it.

    The old proposal is withdrawn, superseded by the new one; the agent gets the edited call.

    The policy decides the new one afresh: it may need another person, or the typed target.

    Example: airlock approvals edit prop_... --set amount=1500 --note 'shipping only'
    """
    _check_id(proposal_id)
    values = parse_set(pairs)
    err = as_json  # with --json, stdout stays one JSON document
    with handle_errors(as_json=as_json):
        from airlock.api import Proposal
        from airlock.protocol import ToolCall

        from ._proposal import parse, signed_action
        from ._session import load_credentials

        with CheckpointClient.signed_in(load_credentials()) as client:
            proposal = _fetch(client, proposal_id)
            action = signed_action(proposal)
            if not isinstance(action, ToolCall):
                raise LocalRefusal("E_STATE", "only a tool call's arguments can be edited")
            if proposal.state != "pending":
                raise LocalRefusal(
                    "E_STATE", f"the proposal is {proposal.state}; only a pending one is edited"
                )
            _echo_lines(_summary(proposal, action), err=err)
            for name, value in values.items():
                was = _json(action.arguments[name]) if name in action.arguments else "(none)"
                typer.echo(f"edit       {inert(name)}: {was} -> {_json(value)}", err=err)
            confirm = _ask(proposal, action, confirm, yes=yes)
            payload: dict[str, Any] = {
                "action_hash": proposal.action_hash,
                "set": values,
                "note": note,
            }
            if confirm is not None:
                payload["confirm"] = confirm
            body = client.call("POST", f"/v1/proposals/{proposal_id}/edit", json=payload)
        result: _Proposal = parse(Proposal, body)
    if as_json:
        _print_json(body)
        return
    _report(proposal_id, result)


def _report(old_id: str, result: _Proposal) -> None:
    say(f"edited {old_id} into {result.id} (the old one is withdrawn)")
    for change in result.edit.changes if result.edit else []:
        say(f"  {change.argument}: {_json(change.was)} -> {_json(change.now)}")
    if result.approval is not None and result.state == "approved":
        say(
            f"approved {result.id}: quorum reached ({_votes(result)}); signed approval "
            f"{result.approval.approval_id}"
        )
    else:
        say(
            f"your vote is recorded on {result.id}: {_votes(result)}; waiting for "
            f"{result.votes_needed} more (state {result.state})"
        )
    typer.echo(f"you approved action hash {result.action_hash}")
