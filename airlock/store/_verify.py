"""Verifying an audit chain, in a database or in an export file (docs/protocol.md#audit-chain).
Not public: use ``airlock.store``.

:func:`verify_chain` re-derives every hash from genesis in a live database;
:func:`verify_export` does the same over the JSON lines of :func:`airlock.store.export`,
with no database, so anyone holding a copy can. Both stop at the first bad row and
report it as a :class:`ChainFault`.

This module only reads: it must never write to the audit table.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.engine import Connection, Engine

from airlock.protocol import Refused, canonical_bytes, loads_strict

from ._audit import (
    EVENT_MAX_BYTES,
    EXPORT_LINE_MAX_BYTES,
    GENESIS_PREV_HASH,
    GENESIS_TYPE,
    connection_of,
    is_hex64,
    require_table,
    stream_rows,
)
from ._chain import chain_hash
from ._engine import read_transaction
from .errors import ExportLineTooLong

__all__ = [
    "ChainFault",
    "ChainReport",
    "FaultKind",
    "read_export_lines",
    "verify_chain",
    "verify_export",
]


class FaultKind(enum.StrEnum):
    """What is wrong with the first bad row."""

    MISSING_GENESIS = "missing_genesis"  # no row 0, or row 0 is not the genesis event
    GAP = "gap"  # the expected seq is absent (a deleted or renumbered row)
    BROKEN_LINK = "broken_link"  # prev_hash differs from the previous row's row_hash
    HASH_MISMATCH = "hash_mismatch"  # row_hash differs from SHA-256(prev ‖ event)
    UNPARSABLE_EVENT = "unparsable_event"  # event is not strict, float-free JSON
    NON_CANONICAL_EVENT = "non_canonical_event"  # event parses but is not its JCS form
    HEAD_MISMATCH = "head_mismatch"  # the chain does not contain the expected head


@dataclass(frozen=True, slots=True)
class ChainFault:
    seq: int
    kind: FaultKind
    detail: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.kind.value}: {self.detail}"


@dataclass(frozen=True, slots=True)
class ChainReport:
    """The outcome of :func:`verify_chain`. ``rows`` counts rows verified good."""

    rows: int
    head_seq: int | None
    head_hash: str | None
    fault: ChainFault | None

    @property
    def ok(self) -> bool:
        return self.fault is None


def _check_row(expected_seq: int, prev_hash: str, row: Any) -> ChainFault | None:
    # Fields are typed object on purpose: a tampered database can hold anything.
    seq: int = row.seq
    event: object = row.event
    row_prev: object = row.prev_hash
    row_hash: object = row.row_hash
    if seq != expected_seq:
        return ChainFault(
            expected_seq,
            FaultKind.MISSING_GENESIS if expected_seq == 0 else FaultKind.GAP,
            f"row {expected_seq} is missing (next row present is {seq})",
        )
    if not isinstance(event, str):
        return ChainFault(seq, FaultKind.UNPARSABLE_EVENT, "event is not text")
    raw = event.encode("utf-8", errors="surrogatepass")
    try:
        value = loads_strict(raw, max_bytes=EVENT_MAX_BYTES, nfc=False)
    except Refused as exc:
        return ChainFault(seq, FaultKind.UNPARSABLE_EVENT, exc.detail)
    if not isinstance(value, dict):
        return ChainFault(seq, FaultKind.UNPARSABLE_EVENT, "event is not a JSON object")
    if canonical_bytes(value) != raw:
        return ChainFault(seq, FaultKind.NON_CANONICAL_EVENT, "event text is not its JCS form")
    if seq == 0 and (value.get("type") != GENESIS_TYPE or set(value) != {"chain", "type"}):
        return ChainFault(0, FaultKind.MISSING_GENESIS, "row 0 is not a genesis event")
    if seq != 0 and value.get("type") == GENESIS_TYPE:
        return ChainFault(seq, FaultKind.BROKEN_LINK, "a second genesis event")
    if row_prev != prev_hash:
        return ChainFault(
            seq,
            FaultKind.BROKEN_LINK,
            f"prev_hash {row_prev!r} is not row {seq - 1}'s row_hash {prev_hash!r}"
            if seq
            else f"genesis prev_hash {row_prev!r} is not all zeros",
        )
    if not is_hex64(row_hash) or chain_hash(prev_hash, raw) != row_hash:
        return ChainFault(
            seq,
            FaultKind.HASH_MISMATCH,
            f"row_hash {row_hash!r} is not SHA-256(prev_hash ‖ event) "
            f"= {chain_hash(prev_hash, raw)!r}",
        )
    return None


def _verify(
    conn: Connection,
    expect_head: tuple[int, str] | None,
    progress: Callable[[int], None] | None,
    batch: int,
) -> ChainReport:
    require_table(conn)
    with closing(stream_rows(conn, batch)) as rows:
        return _verify_rows(rows, expect_head, progress, batch)


def _verify_rows(
    rows: Iterable[Any],
    expect_head: tuple[int, str] | None,
    progress: Callable[[int], None] | None,
    batch: int,
) -> ChainReport:
    expected_seq = 0
    prev_hash = GENESIS_PREV_HASH
    anchor_seen = expect_head is None
    for row in rows:
        fault = row if isinstance(row, ChainFault) else _check_row(expected_seq, prev_hash, row)
        if fault is not None:
            return ChainReport(
                rows=expected_seq,
                head_seq=expected_seq - 1 if expected_seq else None,
                head_hash=prev_hash if expected_seq else None,
                fault=fault,
            )
        if expect_head is not None and row.seq == expect_head[0]:
            if row.row_hash != expect_head[1]:
                return ChainReport(
                    rows=expected_seq,
                    head_seq=expected_seq - 1 if expected_seq else None,
                    head_hash=prev_hash if expected_seq else None,
                    fault=ChainFault(
                        row.seq,
                        FaultKind.HEAD_MISMATCH,
                        f"row_hash {row.row_hash!r} is not the expected {expect_head[1]!r}",
                    ),
                )
            anchor_seen = True
        prev_hash = row.row_hash
        expected_seq += 1
        if progress is not None and expected_seq % batch == 0:
            progress(batch)
    if progress is not None and expected_seq % batch:
        progress(expected_seq % batch)
    if expected_seq == 0:
        return ChainReport(0, None, None, ChainFault(0, FaultKind.MISSING_GENESIS, "empty chain"))
    if not anchor_seen:
        assert expect_head is not None
        return ChainReport(
            rows=expected_seq,
            head_seq=expected_seq - 1,
            head_hash=prev_hash,
            fault=ChainFault(
                expected_seq,
                FaultKind.HEAD_MISMATCH,
                f"chain ends at seq {expected_seq - 1}, before the expected head "
                f"seq {expect_head[0]} (truncated)",
            ),
        )
    return ChainReport(
        rows=expected_seq, head_seq=expected_seq - 1, head_hash=prev_hash, fault=None
    )


def verify_chain(
    source: Engine | Connection,
    *,
    expect_head: tuple[int, str] | None = None,
    progress: Callable[[int], None] | None = None,
    batch: int = 1000,
) -> ChainReport:
    """Re-derive every hash from genesis; report the first bad row, or that all are good.

    ``expect_head`` is a ``(seq, row_hash)`` recorded outside this database (a receipt):
    the chain must contain exactly that row, which detects truncation and wholesale
    rewriting. ``progress`` is called with the number of rows verified since its last
    call. With an Engine, reads one consistent snapshot without blocking writers.
    Raises :class:`ChainError` if there is no audit table at all.
    """
    if batch < 1:
        raise ValueError("batch must be positive")
    if isinstance(source, Engine):
        with read_transaction(source) as conn:
            return _verify(conn, expect_head, progress, batch)
    return _verify(connection_of(source), expect_head, progress, batch)


@dataclass(frozen=True, slots=True)
class _LineRow:
    seq: int
    event: str
    prev_hash: object
    row_hash: object


_EXPORT_KEYS = frozenset({"event", "prev_hash", "row_hash", "seq"})


def _export_rows(lines: Iterable[str]) -> Iterator[_LineRow | ChainFault]:
    for index, line in enumerate(lines):
        raw = line.rstrip("\n").encode("utf-8", errors="surrogatepass")
        try:
            record = loads_strict(raw, max_bytes=EXPORT_LINE_MAX_BYTES, nfc=False)
        except Refused as exc:
            yield ChainFault(index, FaultKind.UNPARSABLE_EVENT, f"line {index + 1}: {exc.detail}")
            return
        if (
            not isinstance(record, dict)
            or set(record) != _EXPORT_KEYS
            or not isinstance(record["seq"], int)
            or isinstance(record["seq"], bool)
            or not isinstance(record["event"], dict)
        ):
            yield ChainFault(
                index, FaultKind.UNPARSABLE_EVENT, f"line {index + 1} is not an audit record"
            )
            return
        # The export embeds each event verbatim, so a canonical line means the stored
        # event text was canonical too, and re-encoding it gives back the hashed bytes.
        if canonical_bytes(record) != raw:
            yield ChainFault(
                record["seq"],
                FaultKind.NON_CANONICAL_EVENT,
                f"line {index + 1} is not its JCS form",
            )
            return
        yield _LineRow(
            seq=record["seq"],
            event=canonical_bytes(record["event"]).decode("utf-8"),
            prev_hash=record["prev_hash"],
            row_hash=record["row_hash"],
        )


class LineReader(Protocol):
    """What :func:`read_export_lines` reads from: a binary file, or a wrapper of one."""

    def readline(self, size: int = -1, /) -> bytes: ...


def read_export_lines(
    handle: LineReader, *, max_bytes: int = EXPORT_LINE_MAX_BYTES, source: str | None = None
) -> Iterator[str]:
    """The lines of an export file opened in binary mode, one at a time, newline removed.

    Lines end at ``\\n`` only (a ``\\r`` stays, for the verifier to refuse as not
    canonical), and are decoded as UTF-8 with invalid bytes kept as surrogate escapes,
    which the strict parser then refuses. A line longer than ``max_bytes`` raises
    :class:`ExportLineTooLong` naming it (and ``source``, e.g. the file's name) after at
    most ``max_bytes + 1`` bytes of it were read: an export is something anyone can hand
    over, and one line of gigabytes, or a file with no newline at all, must not be read
    into memory whole.
    """
    if max_bytes < 1:
        raise ValueError("max_bytes must be positive")
    number = 0
    while True:
        # One byte over the cap tells a line of exactly max_bytes (plus its newline)
        # from a longer one.
        chunk = handle.readline(max_bytes + 1)
        if not chunk:
            return
        number += 1
        body = chunk[:-1] if chunk.endswith(b"\n") else chunk
        if len(body) > max_bytes:
            raise ExportLineTooLong(number, max_bytes, source)
        yield body.decode("utf-8", errors="surrogateescape")


def verify_export(
    lines: Iterable[str], *, expect_head: tuple[int, str] | None = None
) -> ChainReport:
    """Verify the JSON lines of :func:`export` with no database: anyone holding a copy can.

    Same checks and report as :func:`verify_chain`; in addition every line must be
    exactly the canonical (JCS) form of its record. Read a file through
    :func:`read_export_lines`, whose :class:`ExportLineTooLong` passes through: the
    lines before it verified, and it says which line could not be read.
    """
    return _verify_rows(_export_rows(lines), expect_head, None, 1)
