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
    LANES_TYPE,
    connection_of,
    is_hex64,
    require_table,
    stream_rows,
)
from ._chain import chain_hash
from ._engine import read_transaction
from ._lanes import MAX_LANES
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
    """The outcome of :func:`verify_chain`. ``rows`` counts rows verified good; the head
    is the last of them (the highest seq, whichever lane); ``lanes`` the lanes declared."""

    rows: int
    head_seq: int | None
    head_hash: str | None
    fault: ChainFault | None
    lanes: int = 1

    @property
    def ok(self) -> bool:
        return self.fault is None


@dataclass
class _Lane:
    prev_hash: str
    last_seq: int


class _Walk:
    """The verifier's state over rows in seq order: every lane's last row, the chain's
    name and the lanes declared (docs/protocol.md#audit-chain)."""

    def __init__(self) -> None:
        self.lanes: dict[int, _Lane] = {}
        self.declared = 1  # lanes declared so far; one until a lanes row says more
        self.chain: object = None
        self.last_seq = -1
        self.last_hash: str | None = None
        self.rows = 0

    def check(self, row: Any) -> ChainFault | None:
        """Check ``row`` against everything before it; on success take it in."""
        fault = self._check(row)
        if fault is None:
            lane: int = getattr(row, "lane", 0)
            self.lanes[lane] = _Lane(row.row_hash, row.seq)
            self.last_seq, self.last_hash = row.seq, row.row_hash
            self.rows += 1
        return fault

    def _check(self, row: Any) -> ChainFault | None:
        # Fields are typed object on purpose: a tampered database can hold anything.
        seq: int = row.seq
        lane: object = getattr(row, "lane", 0)
        if self.declared == 1 and seq != self.last_seq + 1:
            # One lane: seq runs 0, 1, 2, ... with no gap. With lanes it only rises (the
            # sequence skips numbers that rolled back), and each lane's links find a gap.
            expected = self.last_seq + 1
            return ChainFault(
                expected,
                FaultKind.MISSING_GENESIS if expected == 0 else FaultKind.GAP,
                f"row {expected} is missing (next row present is {seq})",
            )
        if seq <= self.last_seq:
            return ChainFault(seq, FaultKind.GAP, f"seq {seq} follows seq {self.last_seq}")
        if type(lane) is not int or not 0 <= lane < self.declared:
            return ChainFault(
                seq, FaultKind.BROKEN_LINK, f"lane {lane!r} is not one of the lanes declared"
            )
        value, raw, fault = _parse(seq, row.event)
        if fault is not None:
            return fault
        assert value is not None
        state = self.lanes.get(lane)
        fault = self._check_kind(seq, lane, value, first=state is None)
        if fault is not None:
            return fault
        prev_hash = GENESIS_PREV_HASH if state is None else state.prev_hash
        if row.prev_hash != prev_hash:
            return ChainFault(
                seq,
                FaultKind.BROKEN_LINK,
                f"prev_hash {row.prev_hash!r} is not the row_hash {prev_hash!r} of lane "
                f"{lane}'s seq {state.last_seq}"
                if state is not None
                else f"genesis prev_hash {row.prev_hash!r} is not all zeros",
            )
        if not is_hex64(row.row_hash) or chain_hash(prev_hash, raw) != row.row_hash:
            return ChainFault(
                seq,
                FaultKind.HASH_MISMATCH,
                f"row_hash {row.row_hash!r} is not SHA-256(prev_hash ‖ event) "
                f"= {chain_hash(prev_hash, raw)!r}",
            )
        if value.get("type") == LANES_TYPE:
            self.declared = value["lanes"]
        return None

    def _check_kind(
        self, seq: int, lane: int, value: dict[str, Any], *, first: bool
    ) -> ChainFault | None:
        kind = value.get("type")
        if first:
            # A lane begins with its genesis: lane 0 with the chain's, at seq 0; any other
            # with one naming the same chain and the lane (its lane column is hashed so).
            want: dict[str, object] = (
                {"chain": value.get("chain"), "type": GENESIS_TYPE}
                if lane == 0
                else {"chain": self.chain, "lane": lane, "type": GENESIS_TYPE}
            )
            if value != want or not isinstance(value.get("chain"), str):
                return ChainFault(
                    seq, FaultKind.MISSING_GENESIS, f"lane {lane} does not begin with its genesis"
                )
            if lane == 0:
                self.chain = value["chain"]
            return None
        if kind == GENESIS_TYPE:
            return ChainFault(seq, FaultKind.BROKEN_LINK, "a second genesis event")
        if kind == LANES_TYPE:
            lanes = value.get("lanes")
            if (
                lane != 0
                or set(value) != {"at", "chain", "lanes", "type"}
                or value.get("chain") != self.chain
                or type(lanes) is not int
                or not self.declared < lanes <= MAX_LANES
            ):
                return ChainFault(seq, FaultKind.BROKEN_LINK, "a lanes event out of place")
        return None

    def missing_lane(self) -> ChainFault | None:
        """A lane declared that holds no row at all (its genesis and all after it gone)."""
        for lane in range(self.declared):
            if lane not in self.lanes:
                return ChainFault(
                    self.last_seq + 1,
                    FaultKind.MISSING_GENESIS,
                    f"lane {lane} of {self.declared} declared has no rows",
                )
        return None


def _parse(seq: int, event: object) -> tuple[dict[str, Any] | None, bytes, ChainFault | None]:
    if not isinstance(event, str):
        return None, b"", ChainFault(seq, FaultKind.UNPARSABLE_EVENT, "event is not text")
    raw = event.encode("utf-8", errors="surrogatepass")
    try:
        value = loads_strict(raw, max_bytes=EVENT_MAX_BYTES, nfc=False)
    except Refused as exc:
        return None, raw, ChainFault(seq, FaultKind.UNPARSABLE_EVENT, exc.detail)
    if not isinstance(value, dict):
        return None, raw, ChainFault(seq, FaultKind.UNPARSABLE_EVENT, "event is not a JSON object")
    if canonical_bytes(value) != raw:
        return (
            None,
            raw,
            ChainFault(seq, FaultKind.NON_CANONICAL_EVENT, "event text is not its JCS form"),
        )
    return value, raw, None


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
    walk = _Walk()
    anchor_seen = expect_head is None

    def report(fault: ChainFault | None) -> ChainReport:
        return ChainReport(
            rows=walk.rows,
            head_seq=walk.last_seq if walk.rows else None,
            head_hash=walk.last_hash,
            fault=fault,
            lanes=walk.declared,
        )

    for row in rows:
        before = (walk.rows, walk.last_seq, walk.last_hash)
        fault = row if isinstance(row, ChainFault) else walk.check(row)
        if fault is not None:
            return report(fault)
        if expect_head is not None and row.seq == expect_head[0]:
            if row.row_hash != expect_head[1]:
                # The row verified, but is not the one expected: the report ends before it.
                walk.rows, walk.last_seq, walk.last_hash = before
                return report(
                    ChainFault(
                        row.seq,
                        FaultKind.HEAD_MISMATCH,
                        f"row_hash {row.row_hash!r} is not the expected {expect_head[1]!r}",
                    )
                )
            anchor_seen = True
        if progress is not None and walk.rows % batch == 0:
            progress(batch)
    if progress is not None and walk.rows % batch:
        progress(walk.rows % batch)
    if walk.rows == 0:
        return report(ChainFault(0, FaultKind.MISSING_GENESIS, "empty chain"))
    missing = walk.missing_lane()
    if missing is not None:
        return report(missing)
    if not anchor_seen:
        assert expect_head is not None
        return report(
            ChainFault(
                walk.last_seq + 1,
                FaultKind.HEAD_MISMATCH,
                f"the chain holds no row seq {expect_head[0]} (it ends at seq "
                f"{walk.last_seq}): truncated or cut",
            )
        )
    return report(None)


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
    lane: object = 0


_EXPORT_KEYS = frozenset({"event", "prev_hash", "row_hash", "seq"})
# A row of lane 0 leaves its lane out (an export of a chain without lanes reads as it
# always did), so "lane": 0 is no export's line.
_LANE_KEYS = _EXPORT_KEYS | {"lane"}


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
            or set(record) not in (_EXPORT_KEYS, _LANE_KEYS)
            or ("lane" in record and (type(record["lane"]) is not int or record["lane"] < 1))
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
            lane=record.get("lane", 0),
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
