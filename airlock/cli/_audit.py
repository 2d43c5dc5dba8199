"""``airlock audit verify`` and ``airlock audit export``: anyone can check a service's chain.

Exit codes of ``verify``: 0 the chain verifies from genesis; 1 it does not, and the first
bad row is named on stdout; 2 the database could not be read at all. These commands only
read: they never create a database file, repair a row, or write to the chain.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from airlock.store import ChainReport

__all__ = ["audit_app"]

audit_app = typer.Typer(
    name="audit",
    help="Verify or export a service's hash-chained audit log.",
    no_args_is_help=True,
)

_DB = typer.Option("--db", help="Database URL: sqlite:///PATH or postgresql://USER@HOST/DB.")
# Only worth drawing for chains that take a noticeable time to re-hash.
_PROGRESS_MIN_ROWS = 50_000


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
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
        typer.Option("--db", help="Database URL: sqlite:///PATH or postgresql://USER@HOST/DB."),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", help="A file written by `airlock audit export`, instead of --db."),
    ] = None,
    expect_head: Annotated[
        str | None,
        typer.Option(
            "--expect-head",
            help="SEQ:ROW_HASH recorded elsewhere (a receipt): detects truncation/rewrite.",
        ),
    ] = None,
) -> None:
    """Re-derive every row hash from genesis; exit 1 naming the first bad row."""
    from sqlalchemy.exc import SQLAlchemyError

    from airlock.store import Error as StoreError
    from airlock.store import make_engine, verify_export

    if (db is None) == (file is None):
        raise _fail("give exactly one of --db URL or --file EXPORT")
    head = _parse_head(expect_head)
    try:
        if file is not None:
            with file.open(encoding="utf-8", errors="surrogateescape", newline="\n") as handle:
                report = verify_export(handle, expect_head=head)
        else:
            assert db is not None
            engine = make_engine(db, create=False)
            try:
                report = _verify(engine, head)
            finally:
                engine.dispose()
    except (StoreError, SQLAlchemyError, OSError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None
    if report.fault is not None:
        typer.echo(f"FAIL: first bad row {report.fault}")
        typer.echo(f"rows verified before it: {report.rows}")
        raise typer.Exit(1)
    typer.echo(
        f"OK: {report.rows} rows verify from genesis; head seq {report.head_seq} "
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
        Path | None, typer.Option("--out", help="Write JSON lines here (default: stdout).")
    ] = None,
) -> None:
    """Write the chain as JSON lines, genesis first, events verbatim."""
    import os
    import sys

    from sqlalchemy.exc import SQLAlchemyError

    from airlock.store import Error as StoreError
    from airlock.store import export, make_engine, read_transaction

    try:
        engine = make_engine(db, create=False)
        try:
            with read_transaction(engine) as conn:
                if out is None:
                    for line in export(conn):
                        sys.stdout.write(line + "\n")
                    sys.stdout.flush()
                else:
                    with out.open("w", encoding="utf-8", newline="\n") as handle:
                        for line in export(conn):
                            handle.write(line + "\n")
        finally:
            engine.dispose()
    except BrokenPipeError:
        # `airlock audit export --db … | head`: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    except (StoreError, SQLAlchemyError, OSError) as exc:
        raise _fail(str(exc).splitlines()[0]) from None
