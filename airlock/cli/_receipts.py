"""``airlock receipts verify`` and ``airlock executor receipts list|resend``.

``receipts verify`` checks a receipt file against the executor's receipt key set, with no
database. ``executor receipts list|resend`` need only the executor's ledger database: they
show the delivery history of the receipts reported to the checkpoint, queue rejected
ones to be sent again, and, for a checkpoint restored from a backup, delivered ones.
Services are imported inside each command (docs/architecture.md#import-boundaries).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._approvals_show import _when
from ._help import Typer
from ._text import inert, say

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from services.executor import ReceiptHistory, Resend

__all__ = ["executor_receipts_app", "ledger_engine", "receipts_app"]

receipts_app = Typer(name="receipts", help="Check executor receipts.", no_args_is_help=True)
_RESEND_EXIT_CODES = (
    "Exit codes: 0 queued (with --all-rejected or --delivered-since, also when nothing "
    "matches); 1 refused, nothing queued (every reason is printed); 2 usage or "
    "configuration error."
)
executor_receipts_app = Typer(
    name="receipts",
    help=(
        "The receipts this executor reports to the checkpoint: their delivery history, "
        "sending again those the checkpoint refused for good once the cause is fixed, and "
        "those it accepted once it was restored from a backup.\n\n"
        "Examples:\n\n"
        "  airlock executor receipts list                 # every receipt not delivered\n\n"
        "  airlock executor receipts list apv_...         # one approval's history\n\n"
        "  airlock executor receipts resend apv_... --by alice --note 'receipt key installed'"
        "\n\n"
        "  airlock executor receipts resend --all-rejected --by alice --dry-run\n\n"
        "  airlock executor receipts resend --delivered-since 2026-11-29T06:00:00Z --by alice "
        "--note 'checkpoint restored from the 06:00 backup'"
    ),
    no_args_is_help=True,
)


def _fail(message: str) -> typer.Exit:
    say(f"error: {message}", err=True)  # often a file's, a database's or a checkpoint's text
    return typer.Exit(2)


@receipts_app.command("verify")
def receipts_verify_command(
    file: Annotated[Path, typer.Argument(help="A receipt (DSSE envelope JSON).")],
    keys: Annotated[
        Path, typer.Option("--keys", metavar="FILE", help="The executor's receipt key set (JSON).")
    ],
) -> None:
    """Verify a receipt's signature and print what it says; exit 1 if it does not verify.

    Get a proposal's receipt with: airlock approvals show prop_… --receipt apv_….receipt.json

    Example: airlock receipts verify apv_….receipt.json --keys receipt-keys.json

    The audit head it prints is the executor chain's row the receipt vouches for.

    Check it with: airlock audit verify --db EXECUTOR_DB --expect-head SEQ:HASH
    """
    from datetime import UTC, datetime

    from airlock.protocol import KeySet, KeySetError
    from services.executor import InvalidReceipt, verify_receipt

    try:
        keyset = KeySet.from_json_bytes(keys.read_bytes())
        data = file.read_bytes()
    except (OSError, KeySetError) as exc:
        raise _fail(str(exc)) from None
    try:
        receipt = verify_receipt(data.strip(), keyset, int(time.time()))
    except InvalidReceipt as exc:
        say(f"FAIL: {exc}")
        raise typer.Exit(1) from None
    at = datetime.fromtimestamp(receipt.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    # A receipt file comes from anyone, and a signed one quotes the cloud (detail).
    say(f"OK: {receipt.outcome} approval {receipt.approval_id}")
    rows = [
        ("executor", receipt.executor),
        ("action", receipt.action_hash),
        (
            "effect",
            None
            if receipt.outcome != "succeeded"
            else "seen in live state after an unknown answer"
            if receipt.verified
            else "the provider accepted the call",
        ),
        (
            "resolution",
            None
            if receipt.resolution is None
            else f"{receipt.resolution.decision} (by {receipt.resolution.by})",
        ),
        ("refusal", receipt.refusal_code),
        ("request", receipt.cloud_request_id),
        ("at", f"{at} ({receipt.at})"),
        ("audit head", f"{receipt.audit_head.seq}:{receipt.audit_head.hash}"),
        ("detail", receipt.detail),
    ]
    for name, value in rows:
        if value:
            say(f"  {name:<11}{value}")


# -- receipts reported to the checkpoint: history and resend ---------------------------------


def ledger_engine() -> Engine:
    """The ledger database at head: only the database URL of the settings is used.

    Raises ``typer.Exit(2)`` when the settings do not load or the database cannot be
    opened or migrated.
    """
    from airlock.settings import ExecutorSettings
    from airlock.store import Error as StoreError
    from airlock.store import make_engine
    from services.executor import migrate

    from ._settings import load

    try:
        engine = make_engine(load(ExecutorSettings).database_url)
        migrate(engine)
    except StoreError as exc:
        raise _fail(str(exc)) from None
    return engine


def _approval_ids(approval_ids: list[str] | None) -> list[str]:
    from airlock.protocol import APPROVAL_ID_PATTERN

    ids = list(dict.fromkeys(approval_ids or []))
    malformed = [i for i in ids if not re.fullmatch(APPROVAL_ID_PATTERN, i)]
    if malformed:
        raise _fail(f"not an approval id (apv_…): {inert(malformed[0])[:120]}")
    return ids


#: --delivered-since: RFC 3339 UTC with Z (a fraction of a second is dropped, which moves
#: the bound earlier: more is sent again, never less), or integer Unix seconds.
_RFC3339_UTC = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]{1,9})?Z"
)
_UNIX_SECONDS = re.compile(r"[0-9]{1,11}")


def _since(text: str, now: int) -> int:
    """``--delivered-since`` as Unix seconds; anything else, or a time still to come
    (a mistyped year would send nothing and say so quietly), is a usage error (exit 2)."""
    since: int | None = None
    if _UNIX_SECONDS.fullmatch(text):
        since = int(text)
    elif match := _RFC3339_UTC.fullmatch(text):
        try:
            year, month, day, hour, minute, second = map(int, match.groups())
            at = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
            since = int(at.timestamp())
        except ValueError:
            pass  # not a day of the calendar, or hour 24, second 60
    if since is None:
        raise _fail(
            "--delivered-since takes an RFC 3339 UTC time (2026-11-29T06:00:00Z) or integer "
            f"Unix seconds, not {inert(text)[:60]!r}"
        )
    if since > now:
        raise _fail(f"--delivered-since {_when(since)} is in the future by this host's clock")
    return since


def _history_lines(history: ReceiptHistory) -> list[str]:
    state = {
        "pending": "not attempted yet (queued)",
        "delivered": "delivered",
        "rejected": "rejected (send it again with: airlock executor receipts resend)",
        "resend_pending": "queued again",
    }[history.state]
    if history.approval_unknown:
        state = "rejected: the checkpoint has no such approval (404); " + (
            # An older checkpoint answers a refusal 404 too; after an upgrade, one helps.
            "see below" if history.kind == "refusal" else "a resend to it cannot help"
        )
    elif history.resolution_contested:
        state = (
            "in conflict: the checkpoint kept it and shows the conflict (409)"
            if history.resolution_conflict_kept
            else "refused: the checkpoint holds another decision (409)"
        ) + "; a resend cannot help, see below"
    lines = [f"{history.approval_id} {history.kind}: {state}"]
    events: list[tuple[int, int, str]] = []
    for a in history.attempts:
        answer = " ".join(str(x) for x in (a.http_status, a.error_code) if x is not None)
        detail = f"  {inert(a.detail[:200])}" if a.status == "rejected" and a.detail else ""
        events.append(
            (a.attempt, 1, f"  attempt {a.attempt}  {a.status:<9} {answer}  {_when(a.at)}{detail}")
        )
    for r in history.resends:
        note = f"  note: {inert(r.note)}" if r.note else ""
        follows = history.follows(r)
        # After a delivered attempt: a redelivery, for a checkpoint restored from a backup.
        again = "redelivery " if follows is not None and follows.status == "delivered" else ""
        events.append(
            (
                r.attempt,
                0,
                f"  attempt {r.attempt}  {again}requested by {inert(r.requested_by)}  "
                f"{_when(r.requested_at)}{note}",
            )
        )
    return lines + [line for _, _, line in sorted(events)]


#: Where ``receipts list`` sends a person for what a 404 or a 409 means and what helps.
_RECEIPTS_DOC = "docs/operations.md#receipts-and-their-delivery"
_IN_DOUBT_DOC = "docs/operations.md#resolving-an-in_doubt"


def _approval_unknown_line(histories: list[ReceiptHistory]) -> str:
    """One line under the receipts rejected 404 (services/executor/outbox.py
    APPROVAL_UNKNOWN): what it means, and where the remedy is."""
    return (
        f"note E_NOT_FOUND: the checkpoint has no such approval for {len(histories)} "
        "receipt(s) above (404): another checkpoint than the issuer, or one restored from "
        f"before the approval; the ledger keeps them. See {_RECEIPTS_DOC}"
    )


def _resolution_contested_line(histories: list[ReceiptHistory]) -> str:
    """One line under the resolutions answered 409 (services/executor/outbox.py
    resolution_contested): what it means, and where the remedy is."""
    return (
        f"note R_RESOLUTION_CONFLICT: the checkpoint holds another decision for "
        f"{len(histories)} in_doubt(s) above (409): a person resolved it there; check the "
        f"resource in the cloud. See {_IN_DOUBT_DOC}"
    )


@executor_receipts_app.command("list")
def receipts_list_command(
    approval_ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="Approval ids to show (default: every receipt not delivered).",
            metavar="APPROVAL_ID",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show receipts' delivery attempts to the checkpoint, and resends asked for.

    With approval ids: each one's receipts (outcome, resolution, refusal), delivered or not.

    Without: every receipt not delivered (rejected, queued again, or not attempted yet).

    For a receipt rejected with 404 (no such approval at the checkpoint) it says what can help.

    So for a resolution answered 409: the checkpoint holds another decision (a person's there).

    Exit codes: 0 shown; 1 a named approval has no receipt here; 2 usage error.
    """
    from airlock.store import read_transaction
    from services.executor import receipt_history, without_receipt

    ids = _approval_ids(approval_ids)
    engine = ledger_engine()
    try:
        with read_transaction(engine) as conn:
            histories = receipt_history(conn, ids or None)
            missing = without_receipt(conn, ids)
    finally:
        engine.dispose()
    for history in histories:
        for line in _history_lines(history):
            say(line)
    unknown = [h for h in histories if h.approval_unknown]
    if unknown:
        typer.echo(_approval_unknown_line(unknown))
    contested = [h for h in histories if h.resolution_contested]
    if contested:
        typer.echo(_resolution_contested_line(contested))
    if not ids and not histories:
        typer.echo("every receipt was delivered")
    for approval_id, why in missing.items():
        say(f"{approval_id}: {why}", err=True)
    if missing:
        raise typer.Exit(1)


@executor_receipts_app.command("resend", epilog=_RESEND_EXIT_CODES)
def receipts_resend_command(
    approval_ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="Approval ids whose rejected receipts (outcome, resolution, refusal) to send "
            "again, or delivered ones: see the flag below.",
            metavar="APPROVAL_ID",
            show_default=False,
        ),
    ] = None,
    *,
    all_rejected: Annotated[
        bool, typer.Option("--all-rejected", help="Send every rejected receipt again instead.")
    ] = False,
    delivered: Annotated[
        bool,
        typer.Option(
            "--delivered",
            help="Send the named approvals' delivered receipts again instead (a checkpoint "
            "restored from a backup).",
        ),
    ] = False,
    delivered_since: Annotated[
        str | None,
        typer.Option(
            "--delivered-since",
            metavar="TIME",
            help="Send again every receipt last delivered at or after TIME (RFC 3339 UTC "
            "…Z, or Unix seconds), for a checkpoint restored from a backup: a TIME a few "
            "minutes before the backup, by this executor's clock.",
            show_default=False,
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            metavar="NAME",
            help="Who asks (recorded and audited); required unless --dry-run.",
        ),
    ] = None,
    note: Annotated[
        str, typer.Option("--note", metavar="TEXT", help="Why: what was fixed or restored.")
    ] = "",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be queued; change nothing.")
    ] = False,
) -> None:
    """Queue receipts to be delivered to the checkpoint once more, as the same receipt.

    Approval ids, or --all-rejected: receipts the checkpoint refused for good.

    For after the cause is fixed (say the checkpoint now trusts the receipt key).

    --delivered-since TIME, or approval ids with --delivered: receipts it accepted.

    For a checkpoint restored from a backup: pick TIME a few minutes before it was taken.

    Nothing else sends a delivered receipt again; the ledger and receipts never change.

    A resolution goes only after its outcome's new attempt is recorded.

    The request is recorded with --by and --note, and in the audit chain.

    All or nothing: one unknown id, or one with nothing of that kind, refuses it all.

    The running executor delivers it at its next sweep (AIRLOCK_EXECUTOR_RECOVER_EVERY).
    """
    from services.executor import ResendRefused, check_requester

    ids = _approval_ids(approval_ids)
    since = None if delivered_since is None else _since(delivered_since, int(time.time()))
    if sum((all_rejected, bool(ids), since is not None)) != 1:
        raise _fail(
            "name the approval ids to send again, or pass --all-rejected or "
            "--delivered-since TIME (one of them)"
        )
    if delivered and not ids:
        raise _fail("--delivered goes with approval ids; for a time, --delivered-since TIME")
    if by is None and not dry_run:
        raise _fail("--by NAME is required: who asks for a resend is recorded and audited")
    try:
        who = check_requester("-" if by is None else by, note)
    except ResendRefused as exc:
        raise _fail(str(exc)) from None
    redelivery = delivered or since is not None
    plan = _queue(ids, since, redelivery=redelivery, who=who, note=note, dry_run=dry_run)
    _show_queued(plan, since, redelivery=redelivery, dry_run=dry_run)


def _queue(
    ids: list[str],
    since: int | None,
    *,
    redelivery: bool,
    who: str,
    note: str,
    dry_run: bool,
) -> list[Resend]:
    """Queue the resend (or, with ``dry_run``, plan it in a read transaction).

    Raises ``typer.Exit(1)`` when the ledger refuses it, every reason printed.
    """
    from airlock.store import read_transaction
    from services.executor import (
        ResendRefused,
        plan_redelivery,
        plan_resend,
        request_redelivery,
        request_resend,
    )

    engine = ledger_engine()
    try:
        if dry_run:
            with read_transaction(engine) as conn:
                return (
                    plan_redelivery(conn, ids or None, since=since)
                    if redelivery
                    else plan_resend(conn, ids or None)
                )
        if redelivery:
            return request_redelivery(
                engine, ids or None, since=since, by=who, note=note, now=int(time.time())
            )
        return request_resend(engine, ids or None, by=who, note=note, now=int(time.time()))
    except ResendRefused as exc:
        for subject, why in exc.problems:
            say(f"refused ({exc.code.value}): {subject}: {why}", err=True)
        typer.echo("nothing queued" + ("" if dry_run else "; the refusal is audited"), err=True)
        raise typer.Exit(1) from None
    finally:
        engine.dispose()


def _show_queued(plan: list[Resend], since: int | None, *, redelivery: bool, dry_run: bool) -> None:
    """Say what was queued (or would be, with ``dry_run``)."""
    if not plan:
        typer.echo(
            "no rejected receipt: nothing to send again"
            if since is None
            else f"no receipt delivered since {_when(since)}: nothing to send again"
        )
        return
    verb = "would queue" if dry_run else "queued"
    if since is not None:
        typer.echo(f"receipts last delivered at or after {_when(since)}, by this host's clock:")
    for r in plan:
        say(
            f"{verb} the {r.kind} receipt of {r.approval_id} as attempt {r.attempt} "
            f"(after {r.follows.describe()})"
        )
    if redelivery:
        typer.echo(
            "a receipt the checkpoint still has is answered as before; one for an approval "
            "it lost is refused and recorded rejected"
        )
    if not dry_run:
        typer.echo(
            "the executor delivers them at its next sweep; "
            "see `airlock executor receipts list APPROVAL_ID`"
        )
