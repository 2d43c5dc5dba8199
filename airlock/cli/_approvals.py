"""``airlock approvals list|show|approve|reject|revoke|resolve``: review proposals from a shell
(``edit``, of a tool call's arguments, is :mod:`airlock.cli._approvals_edit`).

These commands are clients of the checkpoint's HTTP API, signed in as the person who runs
them (``airlock login`` or ``AIRLOCK_TOKEN``); they import no service. What a person
approves is what they were shown: ``approve`` fetches the proposal, checks that the
canonical action text hashes to the hash the checkpoint states, describes the action from
those very bytes, and sends back that hash — so the checkpoint refuses the vote
(``E_STALE_VIEW``) unless it is for exactly that action. A high-risk action also needs its
resource id typed (or ``--confirm`` from a script), which the checkpoint enforces too.

``approve ID…`` and ``reject ID…`` with several ids decide pending proposals of one
operation and one risk, never a high-risk one, in one confirmation that lists every id and
hash; each is then its own vote for its own hash, and one the checkpoint refuses
(decided, withdrawn or expired meanwhile) is named while the others go through.

Everything the agent, the cloud or the checkpoint supplied (reasons, names, tags, states,
notes) is printed as inert text, ``--json`` too: control and invisible characters are
shown escaped (:mod:`airlock.cli._text`), and nothing is read as markup.
"""

from __future__ import annotations

import enum
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from airlock.units import money

from ._approvals_show import (
    _DECISIONS,
    _REASONS,
    _canonical_text,
    _details,
    _echo_lines,
    _saving_label,
    _summary,
    _votes,
    _when,
    _words,
)
from ._client import (
    EXIT_CODES_HELP,
    CheckpointClient,
    CheckpointUnavailable,
    ExitCode,
    LocalRefusal,
    handle_errors,
)
from ._help import Typer
from ._text import inert, inert_json, say

if TYPE_CHECKING:
    # Imported in the commands that run: ``--help`` loads neither pydantic nor the
    # protocol kernel (a test holds it to this).
    from airlock.api import Proposal as _Proposal
    from airlock.api import ProposalPage as _ProposalPage
    from airlock.protocol import ProposedAction, Saving, ToolCall

__all__ = ["approvals_app"]

approvals_app = Typer(
    name="approvals",
    help=(
        "Review and decide proposals at the checkpoint, as the signed-in person.\n\n"
        "Examples:\n\n"
        "  airlock approvals list --state pending\n\n"
        "  airlock approvals show prop_... \n\n"
        "  airlock approvals approve prop_... --note 'checked with the owner'\n\n"
        "  airlock approvals approve prop_... --confirm i-t4n0example   # high risk, scripted\n\n"
        "  airlock approvals approve prop_a... prop_b... --yes   # several: one confirmation\n\n"
        "  airlock approvals reject prop_... --reason not_idle --note 'batch job on Sundays'\n\n"
        "  airlock approvals edit prop_... --set amount=1500   # a tool call: new proposal\n\n"
        "  airlock approvals list --json | jq '.items[].id'\n\n" + EXIT_CODES_HELP
    ),
    no_args_is_help=True,
)

_PROPOSAL_ID: Final = re.compile(r"prop_[A-Za-z0-9_-]{8,80}")
_DEFAULT_LIMIT: Final = 50
_HASH: Final = re.compile(r"sha256:[0-9a-f]{64}")


class State(enum.StrEnum):
    """A proposal's state, as ``--state`` takes it (typer takes a list of an Enum, not of
    a Literal)."""

    PENDING = "pending"
    APPROVED = "approved"
    EXECUTED = "executed"
    REFUSED = "refused"
    FAILED = "failed"
    IN_DOUBT = "in_doubt"
    REJECTED = "rejected"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"
    REVOKED = "revoked"
    LAPSED = "lapsed"
    DENIED = "denied"


#: A reject reason code: a built-in one, or one the policy adds for a tool call's tool
#: (the checkpoint judges which the proposal admits).
_REASON: Final = re.compile(r"[a-z][a-z0-9_]{0,39}")

# -- plumbing --------------------------------------------------------------------------


def _check_id(proposal_id: str) -> str:
    # Checked here so that nothing but an id can ever be spliced into the request path.
    if _PROPOSAL_ID.fullmatch(proposal_id) is None:
        # Clipped: a pasted log line or a 3,000-character string is not printed back whole.
        shown = inert(proposal_id, limit=40)
        size = f" ({len(proposal_id)} characters)" if len(proposal_id) > 40 else ""
        typer.echo(f"error: '{shown}'{size} is not a proposal id (prop_…)", err=True)
        raise typer.Exit(ExitCode.USAGE)
    return proposal_id


def _fetch(client: CheckpointClient, proposal_id: str) -> _Proposal:
    from airlock.api import Proposal

    from ._proposal import parse

    proposal: _Proposal = parse(Proposal, client.call("GET", f"/v1/proposals/{proposal_id}"))
    if proposal.id != proposal_id:
        raise CheckpointUnavailable(
            f"asked for {proposal_id}, the checkpoint answered {proposal.id}"
        )
    return proposal


def _write_receipt(proposal: _Proposal, path: Path) -> None:
    """Write the outcome's receipt (its DSSE envelope, as the checkpoint holds it) to
    ``path``; exit 1 when the proposal has no outcome yet."""
    import json

    if proposal.outcome is None:
        typer.echo(
            f"error: {proposal.id} has no receipt: no outcome yet (state {proposal.state})",
            err=True,
        )
        raise typer.Exit(ExitCode.REFUSED)
    try:
        path.write_text(json.dumps(proposal.outcome.receipt, indent=2) + "\n")
    except OSError as exc:
        typer.echo(f"error: receipt not written: {inert(str(exc))}", err=True)
        raise typer.Exit(ExitCode.USAGE) from None
    typer.echo(
        f"wrote the receipt of {proposal.outcome.approval_id} to {inert(str(path))}; "
        f"check it: airlock receipts verify {inert(str(path))} --keys KEYSET",
        err=True,
    )


def _print_json(body: Any) -> None:
    typer.echo(inert_json(body))


def _decide(proposal_id: str, verb: str, payload: dict[str, Any]) -> tuple[Any, _Proposal]:
    """POST a decision as the signed-in person; the raw body and its parsed record."""
    from airlock.api import Proposal

    from ._proposal import parse
    from ._session import load_credentials

    with CheckpointClient.signed_in(load_credentials()) as client:
        body = client.call("POST", f"/v1/proposals/{proposal_id}/{verb}", json=payload)
    return body, parse(Proposal, body)


JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print the checkpoint's JSON (for scripts).")
]
NoteOpt = Annotated[str, typer.Option("--note", help="A note recorded with your decision.")]


# -- commands --------------------------------------------------------------------------


@approvals_app.command("list")
def list_command(
    *,
    state: Annotated[
        list[State] | None,
        typer.Option(
            "--state",
            metavar="STATE",
            help="Only this state (" + ", ".join(State) + "); repeat it for any of several.",
        ),
    ] = None,
    operation: Annotated[
        str | None, typer.Option("--operation", help="Only this operation (stop, delete).")
    ] = None,
    account: Annotated[
        str | None, typer.Option("--account", metavar="ACCOUNT_ID", help="Only this account id.")
    ] = None,
    region: Annotated[str | None, typer.Option("--region", help="Only this region.")] = None,
    limit: Annotated[
        int, typer.Option("--limit", metavar="N", min=1, max=200, help="Page size.")
    ] = _DEFAULT_LIMIT,
    before: Annotated[
        str | None,
        typer.Option("--before", metavar="ID", help="Older than this id (the next page)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List proposals, newest first, with filters."""
    states = sorted({s.value for s in state or ()})
    filters = [
        *(("state", s) for s in states),
        *(
            (k, v)
            for k, v in (("operation", operation), ("account", account), ("region", region))
            if v is not None
        ),
    ]
    params: list[tuple[str, str]] = [*filters, ("limit", str(limit))]
    if before is not None:
        params.append(("before", before))
    with handle_errors(as_json=as_json):
        from airlock.api import ProposalPage

        from ._proposal import parse
        from ._session import load_credentials

        with CheckpointClient.signed_in(load_credentials()) as client:
            body = client.call("GET", "/v1/proposals", params=params)
        page: _ProposalPage = parse(ProposalPage, body)
        if len(states) > 1 and page.states != states:
            # A checkpoint older than the repeatable state keeps only the last one given
            # and says nothing: its list would look complete with proposals missing.
            raise CheckpointUnavailable(
                "the checkpoint did not filter on every --state given (it is older than this "
                "CLI); ask for one state at a time"
            )
    if as_json:
        _print_json(body)
        return
    if not page.items:
        typer.echo("no proposals match")
        return
    _table(page)
    if page.next_before:
        # The same filters and page size again: the next page of this list, not of every
        # proposal. The cursor comes from the checkpoint: quoted like the rest, and only
        # ever a proposal id, so the line is safe to paste.
        again = [f"--{k} {shlex.quote(v)}" for k, v in filters]
        if limit != _DEFAULT_LIMIT:
            again.append(f"--limit {limit}")
        if _PROPOSAL_ID.fullmatch(page.next_before):
            again.append(f"--before {shlex.quote(page.next_before)}")
            say(" ".join(["more: airlock approvals list", *again]))
        else:
            say("more proposals: the checkpoint's cursor is not a proposal id, not shown")


def _table(page: _ProposalPage) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(markup=False, highlight=False, emoji=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)  # piped: do not cut ids at 80 columns
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in (
        "ID",
        "STATE",
        "OPERATION",
        "RESOURCE",
        "PROVIDER",
        "REGION",
        "RISK",
        "SAVES/MONTH",
        "VOTES",
        "RULE",
        "CREATED",
    ):
        table.add_column(
            name,
            no_wrap=name in ("ID", "RESOURCE", "SAVES/MONTH"),
            overflow="fold",
            justify="right" if name == "SAVES/MONTH" else "left",
        )
    for p in page.items:
        table.add_row(
            *(
                Text(inert(cell))
                for cell in (
                    p.id,
                    p.state,
                    p.operation,
                    p.resource_id,
                    p.provider,
                    p.region,
                    p.risk,
                    _saving_label(_signed_saving(p)),
                    _votes(p),
                    p.policy.rule,
                    _when(p.created_at),
                )
            )
        )
    console.print(table)
    total = _pending_total(page.items)
    if total:
        say(total)


def _signed_saving(p: _Proposal) -> Saving | None:
    """The saving signed in the action text, or None (none; or the text is not trusted)."""
    from ._proposal import signed_action

    try:
        action = signed_action(p)
    except CheckpointUnavailable:
        return None
    return getattr(action, "saving", None)  # a tool call has none


def _pending_total(items: Sequence[_Proposal]) -> str:
    """``pending on this page: 12 proposals, est. USD 998.20 a month (2 without one)``."""
    from airlock.protocol import CURRENCY_EXPONENTS

    totals: dict[str, int] = {}
    pending = unpriced = 0
    for p in items:
        if p.state != "pending":
            continue
        pending += 1
        saving = _signed_saving(p)
        if saving is None:
            unpriced += 1
        else:
            totals[saving.currency] = totals.get(saving.currency, 0) + saving.monthly_minor
    if not pending:
        return ""
    amount = " + ".join(
        money(minor, currency, CURRENCY_EXPONENTS[currency])
        for currency, minor in sorted(totals.items())
    )
    line = f"pending on this page: {pending} proposal{'' if pending == 1 else 's'}"
    if amount:
        line += f", est. {amount} a month saved"
    if unpriced:
        line += f" ({unpriced} without an estimate)"
    return line


@approvals_app.command("show")
def show_command(
    proposal_id: Annotated[str, typer.Argument(metavar="ID", help="The proposal id (prop_…).")],
    as_json: JsonFlag = False,
    receipt: Annotated[
        Path | None,
        typer.Option(
            "--receipt",
            metavar="FILE",
            help="Also write the executor's signed receipt of its execution to FILE, "
            "for airlock receipts verify FILE --keys KEYSET.",
        ),
    ] = None,
) -> None:
    """Show a proposal: signed action and hash, evidence, votes, outcome, executor refusals.

    --receipt FILE writes the executor's signed receipt of the execution (exit 1: none yet).

    Check it with: airlock receipts verify FILE --keys KEYSET (up's: .airlock/receipt-keys.json).
    """
    _check_id(proposal_id)
    with handle_errors(as_json=as_json):
        from airlock.api import Proposal

        from ._proposal import parse, signed_action
        from ._session import load_credentials

        with CheckpointClient.signed_in(load_credentials()) as client:
            body = client.call("GET", f"/v1/proposals/{proposal_id}")
        proposal: _Proposal = parse(Proposal, body)
        action = signed_action(proposal)
    if receipt is not None:
        _write_receipt(proposal, receipt)
    if as_json:
        _print_json(body)
        return
    _echo_lines(_summary(proposal, action) + _details(proposal) + _canonical_text(proposal))


@approvals_app.command("approve")
def approve_command(
    proposal_ids: Annotated[
        list[str],
        typer.Argument(
            metavar="ID...", help="The proposal id (prop_…); several to decide them together."
        ),
    ],
    *,
    note: NoteOpt = "",
    confirm: Annotated[
        str | None,
        typer.Option(
            "--confirm",
            metavar="RESOURCE_ID",
            help="For a high-risk action: its resource id, instead of typing it at the prompt.",
        ),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Do not ask before approving a non-high-risk action."),
    ] = False,
    expect_hash: Annotated[
        str | None,
        typer.Option(
            "--action-hash",
            metavar="HASH",
            help="Approve only this action hash (one you reviewed earlier with `show`).",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Approve a proposal: shows what will happen and its hash, then votes for that hash.

    High risk (a delete): type the resource id at the prompt, or pass --confirm RESOURCE_ID.

    Other actions ask y/N at the prompt unless --yes is given.

    Without a terminal, a missing --confirm or --yes is refused with exit 2: it never waits.

    Several ids: pending ones of one operation and risk, never high risk (docs/savings.md).

    One confirmation lists every id and hash; then each gets its own vote for its hash.

    One the checkpoint refuses, or no longer pending, is named; the rest go through (exit 1).
    """
    if len(proposal_ids) > 1:
        from ._bulk import decide_many

        if confirm is not None or expect_hash is not None:
            typer.echo(
                "error: --confirm and --action-hash take one proposal; several are approved "
                "for the hashes the confirmation lists",
                err=True,
            )
            raise typer.Exit(ExitCode.USAGE)
        decide_many(
            [_check_id(i) for i in proposal_ids],
            "approve",
            {"note": note},
            yes=yes,
            as_json=as_json,
        )
        return
    _approve_one(
        _check_id(proposal_ids[0]),
        note=note,
        confirm=confirm,
        yes=yes,
        expect_hash=expect_hash,
        as_json=as_json,
    )


def _approve_one(
    proposal_id: str,
    *,
    note: str,
    confirm: str | None,
    yes: bool,
    expect_hash: str | None,
    as_json: bool,
) -> None:
    """``approve`` of one proposal: show it from its signed text, ask, vote for its hash."""
    if expect_hash is not None and _HASH.fullmatch(expect_hash) is None:
        typer.echo(
            f"error: --action-hash {expect_hash[:80]!r} is not an action hash "
            "(sha256: and 64 lowercase hex, as `show` prints it)",
            err=True,
        )
        raise typer.Exit(ExitCode.USAGE)
    # With --json the description goes to stderr so stdout stays one JSON document.
    err = as_json
    with handle_errors(as_json=as_json):
        from airlock.api import Proposal

        from ._proposal import parse, signed_action
        from ._session import load_credentials

        credentials = load_credentials()
        with CheckpointClient.signed_in(credentials) as client:
            proposal = _fetch(client, proposal_id)
            action = signed_action(proposal)
            _echo_lines(_summary(proposal, action), err=err)
            if expect_hash is not None and expect_hash != proposal.action_hash:
                raise LocalRefusal(
                    "E_STALE_VIEW",
                    f"--action-hash {expect_hash} is not this proposal's action hash "
                    f"({proposal.action_hash}); nothing was approved",
                )
            if proposal.state != "pending":
                raise LocalRefusal(
                    "E_STATE",
                    f"the proposal is {proposal.state}; only a pending one can be approved",
                )
            confirm = _ask(proposal, action, confirm, yes=yes)
            sent = expect_hash or proposal.action_hash
            payload: dict[str, Any] = {"action_hash": sent, "note": note}
            if confirm is not None:
                payload["confirm"] = confirm
            body = client.call("POST", f"/v1/proposals/{proposal_id}/approve", json=payload)
        result: _Proposal = parse(Proposal, body)
    if as_json:
        _print_json(body)
        return
    if result.approval is not None and result.state == "approved":
        say(
            f"approved {result.id}: quorum reached ({_votes(result)}); signed approval "
            f"{result.approval.approval_id} valid until {_when(result.approval.expires_at)}"
        )
    else:
        say(
            f"vote recorded on {result.id}: {_votes(result)}; "
            f"waiting for {result.votes_needed} more (state {result.state})"
        )
    typer.echo(f"you approved action hash {sent}")


def _ask(
    proposal: _Proposal, action: ProposedAction | ToolCall, confirm: str | None, *, yes: bool
) -> str | None:
    """Ask the person before one approve: the typed resource id (a tool call's target)
    for high risk, else y/N unless ``yes``. Returns the ``confirm`` to send; exits 2
    when there is no terminal to ask on, 1 when the person says no."""
    from airlock.protocol import ToolCall

    interactive = sys.stdin.isatty()
    if proposal.policy.confirm or action.is_high_risk:
        if confirm is not None:
            return confirm  # sent as given: the checkpoint is the judge of it
        what, expected = (
            ("target", action.target)
            if isinstance(action, ToolCall)
            else ("resource id", action.resource.id)
        )
        if not interactive:
            flag = "TARGET" if isinstance(action, ToolCall) else "RESOURCE_ID"
            typer.echo(
                f"error: this is a high-risk action: type its {what} in a "
                f"terminal, or pass --confirm {flag}",
                err=True,
            )
            raise typer.Exit(ExitCode.USAGE)
        typed = str(typer.prompt(f"High-risk action. Type the {what} to confirm", err=True))
        typed = typed.strip()
        if typed != expected:
            raise LocalRefusal("E_CONFIRM_MISMATCH", f"the typed {what} does not match")
        return typed
    if not yes:
        if not interactive:
            hint = (
                " (--confirm is only for high-risk actions such as a delete)"
                if confirm is not None
                else ""
            )
            typer.echo(f"error: no terminal to ask on: pass --yes to approve{hint}", err=True)
            raise typer.Exit(ExitCode.USAGE)
        if not typer.confirm(f"Approve {proposal.id}?", default=False, err=True):
            typer.echo("not approved; nothing was sent", err=True)
            raise typer.Exit(ExitCode.REFUSED)
    return confirm


@approvals_app.command("reject")
def reject_command(
    proposal_ids: Annotated[
        list[str],
        typer.Argument(
            metavar="ID...", help="The proposal id (prop_…); several to decide them together."
        ),
    ],
    *,
    reason: Annotated[
        str,
        typer.Option(
            "--reason",
            help="Why: not_idle, protected, wrong_target, needs_more_info or other (which "
            "needs --note), or a tool call's own code from the policy. The agent reads it back.",
        ),
    ],
    note: NoteOpt = "",
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="With several ids: do not ask before rejecting.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Reject a pending proposal with a reason code the agent reads back.

    Several ids: as `approve` with several, after one confirmation that lists them all.
    """
    if _REASON.fullmatch(reason) is None:
        typer.echo(f"error: --reason {inert(reason, limit=40)!r} is not a reason code", err=True)
        raise typer.Exit(ExitCode.USAGE)
    if len(proposal_ids) > 1:
        from ._bulk import decide_many

        decide_many(
            [_check_id(i) for i in proposal_ids],
            "reject",
            {"reason_code": reason, "note": note},
            yes=yes,
            as_json=as_json,
        )
        return
    proposal_id = _check_id(proposal_ids[0])
    with handle_errors(as_json=as_json):
        body, result = _decide(proposal_id, "reject", {"reason_code": reason, "note": note})
    if as_json:
        _print_json(body)
        return
    say(f"rejected {result.id}: {_words(_REASONS, reason)}; state {result.state}")


@approvals_app.command("revoke")
def revoke_command(
    proposal_id: Annotated[str, typer.Argument(metavar="ID", help="The proposal id (prop_…).")],
    *,
    note: NoteOpt = "",
    as_json: JsonFlag = False,
) -> None:
    """Revoke an issued approval that has not been executed yet."""
    _check_id(proposal_id)
    with handle_errors(as_json=as_json):
        body, result = _decide(proposal_id, "revoke", {"note": note})
    if as_json:
        _print_json(body)
        return
    approval = result.approval.approval_id if result.approval else "-"
    say(f"revoked approval {approval} of {result.id}; state {result.state}")


@approvals_app.command("resolve")
def resolve_command(
    proposal_id: Annotated[str, typer.Argument(metavar="ID", help="The proposal id (prop_…).")],
    *,
    happened: Annotated[
        bool | None,
        typer.Option(
            "--happened/--did-not-happen",
            help="Whether the in-doubt write took effect (check the cloud console first).",
            show_default=False,
        ),
    ] = None,
    note: Annotated[str, typer.Option("--note", help="Why you decided so (required).")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Resolve an in_doubt execution (admin): it happened, or it did not.

    This changes the checkpoint's record only; the executor's ledger (the truth) stays in_doubt.

    Prefer `airlock executor resolve` where you can: it settles the ledger, then this by receipt.

    Use this only if nobody can reach the executor; its operator then records the same decision.

    An executor resolution that disagrees is kept and shown as a conflict (E_RESOLUTION_CONFLICT).
    """
    _check_id(proposal_id)
    if happened is None:
        typer.echo("error: give --happened or --did-not-happen", err=True)
        raise typer.Exit(ExitCode.USAGE)
    if not note.strip():
        typer.echo("error: --note is required: say how you know", err=True)
        raise typer.Exit(ExitCode.USAGE)
    decision = "happened" if happened else "did_not_happen"
    with handle_errors(as_json=as_json):
        body, result = _decide(proposal_id, "resolve", {"decision": decision, "note": note})
    if as_json:
        _print_json(body)
        return
    say(f"resolved {result.id}: {_DECISIONS[decision]}; state {result.state}")
