"""``airlock audit verify``, ``export``, ``reconcile`` and ``trace``: anyone can check
the chains, and read one action's story in them.

Exit codes of ``verify``: 0 the chain verifies from genesis; 1 it does not, and the first
bad row is named on stdout; 2 the database could not be read at all. ``reconcile``: 0 the
checkpoint's and the executor's chains agree; 1 a finding; 2 an input unreadable. These
commands only read: they never create a database file, repair a row, or write to a chain.

Export files come from anyone, so they are read a line at a time and no line is read
past ``EXPORT_LINE_MAX_BYTES`` (an event's cap plus its record): a longer one is the first
bad row for ``verify`` (exit 1) and an unreadable input for ``reconcile`` (exit 2).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, Final

import typer

from ._help import Typer
from ._text import inert_json, inert_json_line

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from airlock.reconcile import ReconcileReport
    from airlock.store import ChainReport

__all__ = ["audit_app"]

audit_app = Typer(
    name="audit",
    help="Verify, export, cross-check or trace the services' hash-chained audit logs.",
    no_args_is_help=True,
)

_DB = typer.Option(
    "--db", metavar="URL", help="Database URL: sqlite:///PATH or postgresql://USER@HOST/DB."
)
# The two chains, for reconcile and trace: each a database or an export file.
_CHECKPOINT_DB = typer.Option(
    "--checkpoint-db", metavar="URL", help="The checkpoint's database URL."
)
_CHECKPOINT_FILE = typer.Option(
    "--checkpoint-file", metavar="FILE", help="The checkpoint chain's `audit export`."
)
_EXECUTOR_DB = typer.Option(
    "--executor-db", metavar="URL", help="The executor's ledger database URL."
)
_EXECUTOR_FILE = typer.Option(
    "--executor-file", metavar="FILE", help="The executor chain's `audit export`."
)
# Only worth drawing for chains that take a noticeable time to re-hash.
_PROGRESS_MIN_ROWS = 50_000


def _fail(message: str) -> typer.Exit:
    from airlock.reconcile import printable

    typer.echo(f"error: {printable(message)}", err=True)  # often a file's or a database's
    return typer.Exit(2)


def _parse_head(value: str | None) -> tuple[int, str] | None:
    if value is None:
        return None
    seq, sep, digest = value.partition(":")
    if not sep or not seq.isdigit() or len(digest) != 64:
        raise _fail("--expect-head is SEQ:ROW_HASH (64 lowercase hex), e.g. from a receipt")
    return int(seq), digest.lower()


@audit_app.command("verify")
def verify_command(
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            metavar="URL",
            help="Database URL: sqlite:///PATH or postgresql://USER@HOST/DB.",
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            metavar="FILE",
            help="A file written by `airlock audit export`, instead of --db "
            "(a line over 1 MiB + 1 KiB is a bad row, not read further).",
        ),
    ] = None,
    expect_head: Annotated[
        str | None,
        typer.Option(
            "--expect-head",
            metavar="SEQ:ROW_HASH",
            help="A head recorded elsewhere (a receipt's): detects truncation or rewriting "
            "of its lane.",
        ),
    ] = None,
) -> None:
    """Re-derive every row hash from genesis, in every lane; exit 1 naming the first bad row."""
    from sqlalchemy.exc import SQLAlchemyError

    from airlock.reconcile import printable
    from airlock.store import Error as StoreError
    from airlock.store import ExportLineTooLong, make_engine, read_export_lines, verify_export

    if (db is None) == (file is None):
        raise _fail("give exactly one of --db URL or --file EXPORT")
    head = _parse_head(expect_head)
    try:
        if file is not None:
            with file.open("rb") as handle:
                report = verify_export(read_export_lines(handle), expect_head=head)
        else:
            assert db is not None
            engine = make_engine(db, create=False)
            try:
                report = _verify(engine, head)
            finally:
                engine.dispose()
    except ExportLineTooLong as exc:
        # The lines before it verified (verify_export reads on only past a good row), so
        # this is the first bad row, at the seq its line would hold.
        typer.echo(f"FAIL: first bad row seq {exc.line - 1}: {printable(str(exc))}")
        typer.echo(f"rows verified before it: {exc.line - 1}")
        raise typer.Exit(1) from None
    except (StoreError, SQLAlchemyError, OSError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    if report.fault is not None:
        # A bad row is anyone's text: an export file, or a database edited behind the chain.
        typer.echo(f"FAIL: first bad row {printable(str(report.fault))}")
        typer.echo(f"rows verified before it: {report.rows}")
        raise typer.Exit(1)
    lanes = f" in {report.lanes} lanes" if report.lanes > 1 else ""
    typer.echo(
        f"OK: {report.rows} rows verify from genesis{lanes}; head seq {report.head_seq} "
        f"row_hash {report.head_hash}"
    )


def _verify(engine: Engine, head: tuple[int, str] | None) -> ChainReport:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from airlock.store import count_rows, read_transaction, verify_chain

    stderr = Console(stderr=True)
    if not stderr.is_terminal:
        return verify_chain(engine, expect_head=head)
    with read_transaction(engine) as conn:
        total = count_rows(conn)
        if total < _PROGRESS_MIN_ROWS:
            return verify_chain(conn, expect_head=head)
        with Progress(
            TextColumn("verifying"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=stderr,
            transient=True,
        ) as bar:
            task = bar.add_task("chain", total=total)
            return verify_chain(conn, expect_head=head, progress=lambda n: bar.advance(task, n))


@audit_app.command("export")
def export_command(
    db: Annotated[str, _DB],
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Write JSON lines here (default: stdout)."),
    ] = None,
) -> None:
    """Write the chain as JSON lines, genesis first, events verbatim.

    On a terminal what is not printable is shown as JSON escapes: the same values, other bytes.

    So for `airlock audit verify --file`, write to --out or to a pipe.
    """
    import os
    import sys

    from sqlalchemy.exc import SQLAlchemyError

    from airlock.reconcile import printable
    from airlock.store import Error as StoreError
    from airlock.store import export, make_engine, read_transaction

    try:
        engine = make_engine(db, create=False)
        try:
            with read_transaction(engine) as conn:
                if out is None:
                    # A terminal is a person, who must not get an event's text raw;
                    # a file or a pipe gets the bytes that were hashed.
                    person = sys.stdout.isatty()
                    for line in export(conn):
                        sys.stdout.write((inert_json_line(line) if person else line) + "\n")
                    sys.stdout.flush()
                else:
                    rows, last = 0, ""
                    with out.open("w", encoding="utf-8", newline="\n") as handle:
                        for line in export(conn):
                            handle.write(line + "\n")
                            rows, last = rows + 1, line
                    head = json.loads(last) if last else {}
                    typer.echo(
                        printable(
                            f"wrote {_n(rows, 'row')} to {out} (head seq {head.get('seq')} "
                            f"row_hash {head.get('row_hash')})"
                        ),
                        err=True,
                    )
        finally:
            engine.dispose()
    except BrokenPipeError:
        # `airlock audit export --db … | head`: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    except (StoreError, SQLAlchemyError, OSError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _lines_from(stack: ExitStack, label: str, db: str | None, file: Path | None) -> Iterator[str]:
    """The export lines of one chain, from a database (read in one snapshot) or a file."""
    from airlock.store import export, make_engine, read_export_lines, read_transaction, verify_chain

    if (db is None) == (file is None):
        raise _fail(f"give exactly one of --{label}-db URL or --{label}-file EXPORT")
    if file is not None:
        handle = stack.enter_context(file.open("rb"))
        return read_export_lines(handle, source=f"--{label}-file {file}")
    assert db is not None
    engine = make_engine(db, create=False)
    stack.callback(engine.dispose)
    conn = stack.enter_context(read_transaction(engine))
    # export() stops at a row that is not JSON at all; verifying this snapshot first
    # turns that into the named bad row a broken chain deserves, not an unreadable input.
    report = verify_chain(conn)
    if report.fault is not None:
        raise _BrokenChain(label, report)
    return export(conn)


def _head_of(db: str) -> tuple[int, str] | None:
    """The chain's head row as this moment's snapshot shows it (None: an empty chain)."""
    from airlock.store import AuditLog, make_engine, read_transaction

    engine = make_engine(db, create=False)
    try:
        with read_transaction(engine) as conn:
            head = AuditLog.head(conn)
    finally:
        engine.dispose()
    return head.seq, head.row_hash


def _last_row(path: Path) -> tuple[int, str] | None:
    """The ``(seq, row_hash)`` of an export file's last line (its head when it was taken)."""
    from airlock.protocol import Refused, loads_strict
    from airlock.store import EXPORT_LINE_MAX_BYTES, read_export_lines

    last = ""
    with path.open("rb") as handle:
        for line in read_export_lines(handle, source=f"--checkpoint-before {path}"):
            last = line
    try:
        # Strictly, as the verifier reads every line: a duplicate "seq" must not name
        # one head here and another there.
        record = loads_strict(last.encode(), max_bytes=EXPORT_LINE_MAX_BYTES, nfc=False)
        return int(record["seq"]), str(record["row_hash"])
    except (Refused, ValueError, KeyError, TypeError):
        raise _fail(f"--checkpoint-before {path}: not an audit export") from None


class _BrokenChain(Exception):
    def __init__(self, label: str, report: ChainReport) -> None:
        super().__init__(f"the {label} chain does not verify: first bad row {report.fault}")
        self.label = label
        self.report = report


@audit_app.command("reconcile")
def reconcile_command(
    *,
    checkpoint_db: Annotated[str | None, _CHECKPOINT_DB] = None,
    checkpoint_file: Annotated[Path | None, _CHECKPOINT_FILE] = None,
    executor_db: Annotated[str | None, _EXECUTOR_DB] = None,
    executor_file: Annotated[Path | None, _EXECUTOR_FILE] = None,
    checkpoint_before: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint-before",
            metavar="FILE",
            help="With --checkpoint-file: the checkpoint's export taken before the executor's.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (for scripts).")
    ] = False,
) -> None:
    """Cross-check the checkpoint's and the executor's chains; exit 1 on any finding.

    Both chains must verify. Every approval the executor consumed must have been issued here.

    Same hash, nonce, key and approvers (else R_UNISSUED: was the signing key used elsewhere?).

    None consumed twice, written twice or written unconsumed (R_CONSUMED_TWICE, R_WRITE_*).

    Each receipt recorded here names an executor row with that hash and outcome (R_HEAD_*).

    So does each refusal an executor reported before the consume (a note on the proposal).

    Each checkpoint head the executor recorded names a checkpoint row with that hash.

    So a checkpoint chain rewritten or cut is found too (R_CHECKPOINT_HEAD_*).

    An in_doubt resolved at the checkpoint and the executor must agree (R_RESOLUTION_CONFLICT).

    Resolved on one side only is a note, not a finding: a receipt may not be delivered yet.

    On a live system read the checkpoint's chain before and after the executor's.

    With --checkpoint-db and --executor-db it does so itself.

    With files: export the checkpoint's chain, the executor's, then the checkpoint's again.

    Pass the later checkpoint export as --checkpoint-file, the earlier as --checkpoint-before.

    Example: airlock audit reconcile --checkpoint-db URL --executor-db URL

    Exit codes: 0 consistent; 1 findings; 2 an input could not be read.
    """
    import sys

    from airlock.reconcile import ReconcileCode, shown

    report = _reconcile_inputs(
        checkpoint_db, checkpoint_file, executor_db, executor_file, checkpoint_before
    )
    if as_json:
        sys.stdout.write(inert_json(report.to_value(), sort_keys=True) + "\n")
        raise typer.Exit(0 if report.ok else 1)
    if any(f.code is ReconcileCode.R_CHAIN for f in report.findings):
        # Nothing is counted from a chain that does not verify: say so, not zeros.
        typer.echo("not cross-checked: a chain does not verify")
        for finding in report.findings:
            typer.echo(f"FAIL: {finding}")
        raise typer.Exit(1)
    value = report.to_value()
    _count_lines(value)
    _resolution_lines(value["resolutions"])
    if report.ok:
        typer.echo("OK: the two chains agree")
        return
    first, more = shown(report.findings)
    typer.echo(f"FAIL: {len(report.findings)} finding(s)")
    for finding in first:
        typer.echo(f"  {finding}")
    if more:
        typer.echo(f"  … and {more} more (--json lists all)")
    raise typer.Exit(1)


def _reconcile_inputs(
    checkpoint_db: str | None,
    checkpoint_file: Path | None,
    executor_db: str | None,
    executor_file: Path | None,
    checkpoint_before: Path | None,
) -> ReconcileReport:
    """Read both chains (from a database or an export each) and cross-check them.

    Raises ``typer.Exit(2)`` for a usage error or an input that cannot be read; a chain
    that does not verify is an R_CHAIN finding.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from airlock.reconcile import Finding, ReconcileCode, ReconcileReport, reconcile
    from airlock.store import Error as StoreError

    for label, db, file in (
        ("checkpoint", checkpoint_db, checkpoint_file),
        ("executor", executor_db, executor_file),
    ):
        if (db is None) == (file is None):
            raise _fail(f"give exactly one of --{label}-db URL or --{label}-file EXPORT")
    if checkpoint_before is not None and checkpoint_file is None:
        raise _fail("--checkpoint-before goes with --checkpoint-file")
    try:
        with ExitStack() as stack:
            # The checkpoint's head before the executor's read, then the executor's chain,
            # then the checkpoint's: receipts are checked up to the first, everything else
            # against the last (see airlock.reconcile.reconcile).
            before: tuple[int, str] | None = None
            if checkpoint_before is not None:
                before = _last_row(checkpoint_before)
            elif checkpoint_db is not None:
                before = _head_of(checkpoint_db)
            ex = _lines_from(stack, "executor", executor_db, executor_file)
            cp = _lines_from(stack, "checkpoint", checkpoint_db, checkpoint_file)
            report = reconcile(cp, ex, reports_until=before)
    except _BrokenChain as exc:
        report = ReconcileReport(findings=[Finding(ReconcileCode.R_CHAIN, None, str(exc))])
    except (StoreError, SQLAlchemyError, OSError, UnicodeError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    return report


def _count_lines(value: dict[str, Any]) -> None:
    """What each chain holds, as ``ReconcileReport.to_value`` counts it: three lines."""
    from airlock.reconcile import printable

    cp_side, ex_side = value["checkpoint"], value["executor"]
    typer.echo(
        f"checkpoint: {_n(cp_side['rows'], 'row')}; {_n(cp_side['issued'], 'approval')} "
        f"issued, {cp_side['revoked']} revoked, {cp_side['lapsed']} lapsed; "
        f"{_n(cp_side['reported'], 'outcome')} recorded, {cp_side['anchored']} checked "
        "against the executor chain by their receipt's head"
        + (
            f" ({cp_side['reported_later']} recorded after the executor's chain was read)"
            if cp_side["reported_later"]
            else ""
        )
        + f"; {_n(cp_side['refusals'], 'executor refusal')} noted, "
        f"{cp_side['refusals_anchored']} checked the same way"
        + (
            f" ({cp_side['refusals_later']} noted after the executor's chain was read)"
            if cp_side["refusals_later"]
            else ""
        )
    )
    outcomes = (
        ", ".join(f"{n} {printable(state)}" for state, n in ex_side["outcomes"].items()) or "none"
    )
    typer.echo(
        f"executor:   {_n(ex_side['rows'], 'row')}; {_n(ex_side['consumed'], 'approval')} "
        f"consumed, {ex_side['writes']} committed to a write; outcomes: {outcomes}; "
        f"{ex_side['resolutions']} resolved by a person; "
        f"{_n(ex_side['anchored'], 'checkpoint head')} recorded, checked against the "
        "checkpoint chain"
    )
    typer.echo(
        f"issued, never consumed: {value['not_consumed']}; "
        f"finished, not yet recorded at the checkpoint: {value['not_reported']}"
    )


#: One-sided resolutions listed by id in the text report (``--json`` lists all).
_NOTES_SHOWN: Final = 20


def _resolution_lines(res: dict[str, Any]) -> None:
    """The in_doubt resolutions of both sides, and those one side only has (notes: see
    airlock.reconcile), each with what to do."""
    from airlock.reconcile import printable

    if not (res["at_checkpoint"] or res["at_executor"]):
        return
    typer.echo(
        f"resolutions: {res['at_checkpoint']} by a person at the checkpoint, "
        f"{res['at_executor']} at the executor; {res['agree']} made in both places agree, "
        f"{res['conflict']} conflict; {res['executor_receipts_kept']} executor resolution "
        f"receipts kept after a person's, {res['executor_receipts_anchored']} checked "
        "against the executor chain"
    )
    for key, say in (
        (
            "executor_only",
            "resolved at the executor, not (yet) at the checkpoint: its receipt may not be "
            "delivered yet (airlock executor receipts list {id})",
        ),
        (
            "checkpoint_only",
            "resolved at the checkpoint only; the executor's ledger still says in_doubt "
            "(once the cloud is checked, record the same decision there: airlock executor "
            "resolve {id} --by NAME --happened or --did-not-happen)",
        ),
    ):
        ids = res[key]
        for aid in ids[:_NOTES_SHOWN]:
            typer.echo("note: " + printable(aid) + " " + say.format(id=printable(aid)))
        if len(ids) > _NOTES_SHOWN:
            typer.echo(f"note: … and {len(ids) - _NOTES_SHOWN} more (--json lists all)")


class _Digesting:
    """A binary file whose ``readline`` also hashes every byte it returns."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self._sha256 = hashlib.sha256()

    def readline(self, size: int = -1, /) -> bytes:
        data = self._handle.readline(size)
        self._sha256.update(data)
        return data

    def hexdigest(self) -> str:
        # The rest too: a verify that stopped early must still name the whole file.
        for chunk in iter(lambda: self._handle.read(1 << 16), b""):
            self._sha256.update(chunk)
        return self._sha256.hexdigest()


def _trace_source(
    stack: ExitStack, label: str, db: str | None, file: Path | None
) -> tuple[Callable[[], Iterable[str]], int] | None:
    """One chain for ``trace``, verified from genesis first: a function giving its export
    lines afresh (called twice), and its row count; None when neither option was given."""
    from airlock.store import (
        export,
        make_engine,
        read_export_lines,
        read_transaction,
        verify_chain,
        verify_export,
    )

    if db is not None and file is not None:
        raise _fail(f"give at most one of --{label}-db URL or --{label}-file EXPORT")
    if file is not None:
        # Read three times (verified, then trace's two passes): each read is hashed, and a
        # file that is not the one verified is refused, so every line printed is a row of
        # the chain that verified, whoever can write the file meanwhile.
        source = f"--{label}-file {file}"
        with file.open("rb") as handle:
            digesting = _Digesting(handle)
            report = verify_export(read_export_lines(digesting, source=source))
            verified = digesting.hexdigest()
        if report.fault is not None:
            raise _BrokenChain(label, report)

        def from_file() -> Iterator[str]:
            with file.open("rb") as handle:
                again = _Digesting(handle)
                yield from read_export_lines(again, source=source)
                if again.hexdigest() != verified:
                    raise OSError(f"{source} changed while it was read")

        return from_file, report.rows
    if db is not None:
        engine = make_engine(db, create=False)
        stack.callback(engine.dispose)
        conn = stack.enter_context(read_transaction(engine))  # one snapshot, both passes
        report = verify_chain(conn)
        if report.fault is not None:
            raise _BrokenChain(label, report)
        return (lambda: export(conn)), report.rows
    return None


def _shown_value(value: object, limit: int = 160) -> str:
    from airlock.reconcile import printable

    if isinstance(value, str) and value and not any(c in value for c in ' ="'):
        text = value
    else:  # quoted where a space, '=' or '"' would blur where the value ends
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@audit_app.command("trace")
def trace_command(
    ident: Annotated[
        str,
        typer.Argument(metavar="ID", help="A proposal id (prop_…) or an approval id (apv_…)."),
    ],
    *,
    checkpoint_db: Annotated[str | None, _CHECKPOINT_DB] = None,
    checkpoint_file: Annotated[Path | None, _CHECKPOINT_FILE] = None,
    executor_db: Annotated[str | None, _EXECUTOR_DB] = None,
    executor_file: Annotated[Path | None, _EXECUTOR_FILE] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the events whole, as JSON (for scripts).")
    ] = False,
) -> None:
    """Every event the chains hold about one proposal or approval, in time order.

    Give one chain or both, each a database or an export file.

    Each is verified from genesis first: every line printed is a row of a chain that verifies.

    A proposal id shows its approvals too, and an approval id its proposal.

    Example: airlock audit trace prop_… --checkpoint-db URL --executor-db URL

    Exit codes: 0 events found; 1 a chain does not verify, or no event names ID; 2 bad input.
    """
    import sys

    from sqlalchemy.exc import SQLAlchemyError

    from airlock.reconcile import printable
    from airlock.store import Error as StoreError
    from airlock.trace import ID_PATTERN, trace

    if not ID_PATTERN.fullmatch(ident):
        raise _fail("ID is a proposal id (prop_…) or an approval id (apv_…)")
    try:
        with ExitStack() as stack:
            chains: dict[str, Callable[[], Iterable[str]]] = {}
            rows: dict[str, int] = {}
            for label, db, file in (
                ("checkpoint", checkpoint_db, checkpoint_file),
                ("executor", executor_db, executor_file),
            ):
                given = _trace_source(stack, label, db, file)
                if given is not None:
                    chains[label], rows[label] = given
            if not chains:
                raise _fail("give a chain: --checkpoint-db/--checkpoint-file, --executor-db/…")
            found = trace(ident, chains)
    except _BrokenChain as exc:
        typer.echo(f"FAIL: {printable(str(exc))}; nothing traced")
        raise typer.Exit(1) from None
    except (StoreError, SQLAlchemyError, OSError, UnicodeError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    if as_json:
        value = {**found.to_value(), "rows": rows}
        sys.stdout.write(inert_json(value, sort_keys=True) + "\n")
        raise typer.Exit(0 if found.events else 1)
    verified = ", ".join(f"{label} {_n(n, 'row')}" for label, n in rows.items())
    if not found.events:
        typer.echo(f"no event names {ident} (chains verified from genesis: {verified})")
        raise typer.Exit(1)
    # Ids linked to the one asked for are the chains' text, not checked against a pattern.
    typer.echo(
        f"proposal {printable(', '.join(found.proposals)) or '?'}; "
        f"approval {printable(', '.join(found.approvals)) or 'none'}"
    )
    width = max(len(f"{e.chain} #{e.seq}") for e in found.events)
    for e in found.events:
        details = " ".join(
            f"{key}={_shown_value(value)}"
            for key, value in sorted(e.event.items())
            if key not in ("type", "at", "proposal_id", "approval_id") and value is not None
        )
        where = f"{e.chain} #{e.seq}".ljust(width)
        typer.echo(f"{_shown_value(e.at)}  {where}  {_shown_value(e.event.get('type'))}  {details}")
    typer.echo(f"{_n(len(found.events), 'event')}; chains verified from genesis: {verified}")
