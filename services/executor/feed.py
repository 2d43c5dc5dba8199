"""The checkpoint side of the executor: the long-poll feed in, the outcome outbox out.

:class:`CheckpointFeedSource` implements the :class:`~services.executor.sources.BundleSource`
port over ``GET /v1/feed``. Delivery is **at least once**: the cursor lives in the
executor's own database and moves past an item only after the item is recorded — an
approval in the ledger or the refusals table, a revocation in ``executor_revocations``.
A crash in between redelivers the approval, and the ledger refuses it as ``E_REPLAY``:
the source never skips anything by local state that the ledger must judge. The daemon may
execute a page's approvals side by side, and they commit in any order; the cursor moves
only past the page's leading run of committed ones (:meth:`CheckpointFeedSource.ack_in`).

Revocations are written to the database as they arrive and :class:`LedgerRevocations`
answers step 12 from there, so a revocation survives restarts, is shared by every
executor on one ledger, and is honoured even when it arrives before its approval.

A page with items also carries the checkpoint audit chain's head (``audit_head``), and
the transaction that records the page (for a page with approvals, the first of their
consumes or refusals to commit) appends it to our chain as
``executor.checkpoint_head`` when it differs from the last one recorded: the checkpoint's
chain is then anchored in ours, as ours is in its by the heads our receipts carry, and
``airlock audit reconcile`` finds either chain rewritten or cut. A page without a valid
head (an older checkpoint) records none and is otherwise handled as before: the head is
evidence, never a condition of executing.

A page also says where the checkpoint's feed ends (``feed_head``). A feed that ends
before our cursor went back: the checkpoint's database was restored from a backup or
reset. Its new items still come after the cursor: the checkpoint takes a feed seq from
its clock as well as its counter, and raises the counter to a cursor it is asked with
that is past it. The source logs a warning, once per such head, and moves nothing.

A page also names *our* chain's head as the receipt the checkpoint accepted last named it
(``executor_head``). A chain that does not hold it belongs to a ledger that went back
(restored from a backup, or replaced) and may have forgotten approvals it used; the
source then records a hold (``executor_ledger_holds``, ``executor.ledger_behind``) and
hands over no approval for ``ledger_hold_s`` (the approval lifetime plus the clock
skew), so that every approval the lost rows could have used has expired first. A hold
survives restarts and ends by time only; revocations are still recorded meanwhile.

:class:`CheckpointFeedSource` decides nothing about what is executed and never writes to
the cloud or changes a ledger row. Each page has a deadline from its start, connect,
status line and headers included (``page_grace_s`` after the long-poll's wait). A
checkpoint that is down, misses the deadline or answers 5xx/429 is retried with a capped
exponential backoff; 401/403 raises
:class:`~services.executor.errors.CheckpointUnauthorized`. The receipts go the other way
(:mod:`services.executor.outbox`); both share :mod:`services.executor._http`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar, Final

import httpx
import pydantic
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from airlock.api import ChainHead, ExecutorHead, FeedItem, FeedPage
from airlock.events import ExecutorEvent
from airlock.httpdeadline import within
from airlock.ledger import held_until, insert_ignore
from airlock.protocol import (
    APPROVAL_ID_PATTERN,
    BUNDLE_MAX_BYTES,
    Refused,
    canonical_bytes,
    loads_strict,
)
from airlock.store import AuditLog, Prepared, read_statements, read_transaction

from ._http import (
    PAGE_GRACE_S,
    Backoff,
    Idle,
    Transient,
    check_auth,
    clip,
    error_code,
    feed_name,
    no_idle,
    read_at_most,
)
from .failpoints import Failpoints
from .models import checkpoint_head, feed_cursor, ledger_holds, revocations
from .sources import Delivery

__all__ = [
    "DEFAULT_LEDGER_HOLD_S",
    "HOLD_POLL_S",
    "CheckpointFeedSource",
    "LedgerRevocations",
    "advance_cursor",
    "read_cursor",
]

_log = logging.getLogger("airlock.executor.feed")

#: Items per feed page. A page is read whole, so this bounds memory: at most this many
#: bundles of at most 64 KiB each, plus the wrapper.
PAGE_LIMIT: Final = 20
_PAGE_MAX_BYTES: Final = PAGE_LIMIT * (2 * BUNDLE_MAX_BYTES) + 64 * 1024
#: Least time between two empty answers to a long-poll: a checkpoint (or a proxy) that
#: ignores ``wait`` and answers at once would otherwise be asked again and again as fast
#: as the network allows. The checkpoint itself waits at least a second.
_EMPTY_POLL_MIN_S: Final = 1.0
#: Pages one ``receive`` reads on past pages that hand over no approval (revocations).
_PAGES_PER_RECEIVE: Final = 20
#: How long the feed is held when this ledger lacks the head the checkpoint recorded
#: from its receipts: the executor's default approval lifetime and clock skew
#: (``AIRLOCK_EXECUTOR_MAX_TTL`` + ``AIRLOCK_EXECUTOR_SKEW``); the CLI passes the settings.
DEFAULT_LEDGER_HOLD_S: Final = 15 * 60 + 30
#: While held, how often the feed is asked again (and the hold logged at most this often).
HOLD_POLL_S: Final = 5.0
_HOLD_LOG_EVERY_S: Final = 60.0
_APPROVAL_ID: Final = re.compile(APPROVAL_ID_PATTERN)


def _at(now: int) -> datetime:
    return datetime.fromtimestamp(now, UTC)


class LedgerRevocations(Container[str]):
    """Step 12's revoked set, read from ``executor_revocations`` at each question.

    ``extra`` adds ids from elsewhere (the CLI's revocations file). A database error
    propagates: failing to read revocations must never read as "not revoked".
    """

    def __init__(self, engine: Engine, extra: Container[str] = frozenset()) -> None:
        self._engine = engine
        self._extra = extra

    def __contains__(self, approval_id: object) -> bool:
        if not isinstance(approval_id, str):
            return False
        if approval_id in self._extra:
            return True
        with read_transaction(self._engine) as conn:
            found = conn.execute(
                sa.select(revocations.c.approval_id).where(revocations.c.approval_id == approval_id)
            ).first()
        return found is not None

    @property
    def beyond_ledger(self) -> Container[str]:
        """The ids from elsewhere: the rest is the ledger's (see sources.beyond_ledger)."""
        return self._extra


def read_cursor(conn: Connection, feed: str) -> int:
    seq = conn.execute(sa.select(feed_cursor.c.seq).where(feed_cursor.c.feed == feed)).scalar()
    return 0 if seq is None else int(seq)


_FEED = sa.bindparam("feed", type_=feed_cursor.c.feed.type)
# read_cursor's statement for the source, which asks before every page (compiled once).
_CURSOR: Final = Prepared(sa.select(feed_cursor.c.seq).where(feed_cursor.c.feed == _FEED))
_SEQ = sa.bindparam("seq", type_=sa.BigInteger)
_NOW = sa.bindparam("now", type_=sa.BigInteger)
_MOVE: Final = Prepared(
    sa.update(feed_cursor)
    .where(feed_cursor.c.feed == _FEED, feed_cursor.c.seq < _SEQ)
    .values(seq=_SEQ, updated_at=_NOW)
)
# Not an upsert: the insert guard of ledger migration 0008 makes SQLite skip one whole.
_CREATE: Final = {
    dialect: Prepared(
        insert(feed_cursor).values(feed=_FEED, seq=_SEQ, updated_at=_NOW).on_conflict_do_nothing()
    )
    for dialect, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


_HASH = sa.bindparam("hash", type_=checkpoint_head.c.hash.type)
_HEAD_MOVE: Final = Prepared(
    sa.update(checkpoint_head)
    .where(
        checkpoint_head.c.feed == _FEED,
        sa.or_(checkpoint_head.c.seq != _SEQ, checkpoint_head.c.hash != _HASH),
    )
    .values(seq=_SEQ, hash=_HASH, recorded_at=_NOW)
)
# Ignoring a conflict: an executor in another lane may insert it meanwhile.
_HEAD_CREATE: Final = {
    dialect: Prepared(
        insert(checkpoint_head)
        .values(feed=_FEED, seq=_SEQ, hash=_HASH, recorded_at=_NOW)
        .on_conflict_do_nothing()
        .returning(checkpoint_head.c.feed)
    )
    for dialect, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


def advance_cursor(conn: Connection, feed: str, seq: int, now: int) -> None:
    """Move the cursor forward to ``seq`` (never back: another executor may be ahead)."""
    params = {"feed": feed, "seq": seq, "now": now}
    # Moved in one statement once the row exists; else created (or found ahead).
    if not _MOVE.rowcount(conn, params):
        _CREATE[conn.dialect.name].rowcount(conn, params)


@dataclass(slots=True)
class _Page:
    """The approvals of the page last handed over, in feed order: the cursor that each
    one's acknowledgement may move to, and which have committed.

    Deliveries may commit in any order (:mod:`services.executor.parallel`), and the cursor
    may never pass one that has not: an acknowledgement moves it only past the run of
    committed approvals at the page's start (:meth:`reach`)."""

    refs: list[str]
    ack_to: dict[str, int]
    done: set[str] = field(default_factory=set)
    #: The furthest cursor a committed transaction of this page wrote, or 0.
    written: int = 0

    def reach(self, also: str | None = None) -> int | None:
        """The cursor past the page's leading run of committed approvals (counting
        ``also`` as committed); None while the first is not."""
        to = None
        for ref in self.refs:
            if ref != also and ref not in self.done:
                break
            to = self.ack_to[ref]
        return to


@dataclass(frozen=True, slots=True)
class _Revocation:
    seq: int
    approval_id: str


def _in_order(item: FeedItem | None, last: int, end: int) -> bool:
    """Is ``item`` well formed, its ``seq`` after ``last`` and at most the page's cursor?"""
    return item is not None and last < item.seq <= end


class CheckpointFeedSource:
    """Approvals from the checkpoint's long-poll feed, in feed order, at least once.

    A page must be whole within ``page_grace_s`` after the long-poll's wait, counted from
    the request's start; a ledger hold lasts ``ledger_hold_s``.
    """

    long_poll: ClassVar[bool] = True

    def __init__(
        self,
        *,
        engine: Engine,
        client: httpx.Client,
        clock: Callable[[], int],
        feed: str | None = None,
        backoff: Backoff | None = None,
        failpoints: Failpoints | None = None,
        sleep: Callable[[float], None] = time.sleep,
        idle: Idle = no_idle,
        extra_revoked: Container[str] = frozenset(),
        monotonic: Callable[[], float] = time.monotonic,
        ledger_hold_s: int = DEFAULT_LEDGER_HOLD_S,
        page_grace_s: float = PAGE_GRACE_S,
    ) -> None:
        if ledger_hold_s < 0:
            raise ValueError("ledger_hold_s must not be negative")
        if page_grace_s <= 0:
            raise ValueError("page_grace_s must be positive")
        self._engine = engine
        self._grace = page_grace_s
        self._mono = monotonic
        self._hold_s = ledger_hold_s
        self._hold_logged_at: float | None = None
        #: The feed has answered in this process, so the ledger was checked against the
        #: head it names (see :meth:`check_ledger`): recovery may continue claimed rows.
        self.ledger_checked = False
        self._client = client
        # Joined to the client's base URL once, as httpx joins it on every request.
        self._url = client.build_request("GET", "/v1/feed").url
        self._clock = clock
        self._feed = feed or feed_name(str(client.base_url))
        self._backoff = backoff or Backoff()
        self._fp = failpoints or Failpoints.inert()
        self._sleep = sleep
        self._idle = idle
        self._revoked = LedgerRevocations(engine, extra_revoked)
        # The page last handed over, and what its acknowledgements did: deliveries may be
        # executed on several threads at once (services.executor.parallel).
        self._lock = threading.Lock()
        self._page: _Page | None = None
        # delivery ref -> the cursor its transaction moves to, until it commits
        self._moving: dict[str, int] = {}
        self._behind_warned: int | None = None  # the feed_head last warned about
        #: The head of the page last handed over, until an acknowledgement records it.
        self._pending_head: ChainHead | None = None

    @property
    def feed(self) -> str:
        return self._feed

    def cursor(self) -> int:
        # Asked before every page: one statement, no transaction around it.
        with read_statements(self._engine) as conn:
            found = _CURSOR.first(conn, {"feed": self._feed})
        return 0 if found is None or found[0] is None else int(found[0])

    def revoked(self) -> Container[str]:
        return self._revoked

    def receive(self, *, wait_s: float) -> Sequence[Delivery]:
        """Long-poll a page; record its revocations; hand over its approvals.

        A page that moved the cursor without an approval (revocations only) is followed
        by the next at once, so ``--once`` does not stop short of approvals behind it.
        On a transient failure, waits out the backoff and returns nothing.
        """
        for _ in range(_PAGES_PER_RECEIVE):
            after = self.cursor()
            delivered = self._receive_page(after, wait_s)
            if delivered or self.cursor() == after:
                return delivered
        return ()

    def _receive_page(self, after: int, wait_s: float) -> Sequence[Delivery]:
        asked = self._mono()
        try:
            with self._idle():
                page = self._get(after, wait_s)
        except Transient as exc:
            delay = self._backoff.failure()
            _log.warning(
                "feed unavailable (%s); attempt %d, retrying in %.1fs",
                exc,
                self._backoff.failures,
                delay,
            )
            with self._idle():
                self._sleep(delay)
            return ()
        if self._backoff.failures:
            _log.info("feed reachable again at cursor %d", after)
        self._backoff.reset()
        _log.debug("feed polled after %d: %d item(s)", after, len(page.items))
        self._warn_if_behind(after, page.feed_head)
        head = page.executor_head
        if not self.ledger_checked:
            self._hold_if_foreign(head, self._clock())
            self.ledger_checked = True
        if page.has_approval and self._holding(head):
            self._accept(after, page, hold=True)  # its revocations still count
            with self._idle():
                self._sleep(HOLD_POLL_S)
            return ()
        early = min(wait_s, _EMPTY_POLL_MIN_S) - (self._mono() - asked)
        if not page.items and page.cursor == after and early > 0:
            with self._idle():
                self._sleep(early)  # an empty answer before the wait: not asked again yet
        return self._accept(after, page)

    def check_ledger(self) -> None:
        """Ask the feed once (no wait, nothing taken) and record a hold if the head it
        names from the checkpoint's receipts is not in this chain. Run before the first
        recovery pass; a feed that cannot be read now is logged, not raised (the pages
        read later check again)."""
        try:
            page = self._get(self.cursor(), 0)
        except Transient as exc:
            _log.warning("the ledger could not be checked against the feed now: %s", exc)
            return
        self._hold_if_foreign(page.executor_head, self._clock())
        self.ledger_checked = True

    def _hold_if_foreign(self, head: ExecutorHead | None, now: int) -> None:
        """Record a hold for ``head`` if this chain does not hold it."""
        if head is None:
            return
        with read_transaction(self._engine) as conn:
            ours = AuditLog.row_hash_at(conn, head.seq) == head.hash
        if not ours:
            self._hold_for(head, now)

    def _holding(self, head: ExecutorHead | None) -> bool:
        """Must this page's approvals wait, because this ledger may have forgotten
        approvals it used?

        ``head`` is our chain's head as the receipt the checkpoint accepted last named
        it. Our chain holds it unless the ledger went back (restored from a backup, or
        replaced): then approvals consumed since that backup are forgotten, and one of
        them presented again would pass every check up to the live re-read. A hold is
        recorded in the ledger (``executor_ledger_holds``, and ``executor.ledger_behind``
        in the chain) once per such head, from now (or the receipt's time, if later)
        for ``ledger_hold_s`` (the approval lifetime plus the clock skew), after which
        every approval the lost rows could have used has expired. A hold survives
        restarts and is never shortened: a head of ours named later (a receipt the
        restored ledger sent since) does not end it.
        """
        now = self._clock()
        # Asked on every page with an approval, as two reads with no transaction around
        # them (rows of the chain never change, holds are only added). A head not in this
        # chain is then held, and the hold read again.
        foreign = None
        with read_statements(self._engine) as conn:
            if head is not None and AuditLog.row_hash_at(conn, head.seq) != head.hash:
                foreign = head
            until = held_until(conn)
        if foreign is not None:
            self._hold_for(foreign, now)
            with read_statements(self._engine) as conn:
                until = held_until(conn)
        if until is None or now >= until:
            return False
        mono = self._mono()
        if self._hold_logged_at is None or mono - self._hold_logged_at >= _HOLD_LOG_EVERY_S:
            self._hold_logged_at = mono
            _log.error(
                "holding the feed's approvals for %d s more: this ledger may have forgotten "
                "approvals it used (see executor.ledger_behind in its audit chain)",
                until - now,
            )
        return True

    def _hold_for(self, head: ExecutorHead, now: int) -> None:
        """Record a hold for ``head`` unless one exists (UNIQUE per feed and head)."""
        # Not before the receipt's time: on a host whose clock is behind the old one's,
        # approvals used just before the backup expire later than ``now`` suggests. At
        # most one hold length later, so a wrong ``at`` cannot hold the feed for ever.
        since = now if head.at is None else min(max(now, head.at), now + self._hold_s)
        with self._engine.begin() as conn:
            AuditLog.lock(conn)  # the chain lock before the row, as everywhere
            inserted = conn.execute(
                insert_ignore(conn, ledger_holds)
                .values(
                    feed=self._feed,
                    head_seq=head.seq,
                    head_hash=head.hash,
                    since=since,
                    until=since + self._hold_s,
                )
                .returning(ledger_holds.c.id)
            ).first()
            if inserted is None:
                return
            own = AuditLog.head(conn)
            AuditLog.append(
                conn,
                {
                    "type": ExecutorEvent.LEDGER_BEHIND,
                    "feed": self._feed,
                    "checkpoint_records": {"seq": head.seq, "hash": head.hash, "at": head.at},
                    "own_head": {"seq": own.seq, "hash": own.row_hash},
                    "hold_until": since + self._hold_s,
                },
                at=_at(now),
            )
        _log.error(
            "this ledger does not hold audit row %d (%s) that the checkpoint's last "
            "receipt from this executor names (own head: %d): the ledger was restored from "
            "a backup, or replaced, and may have forgotten approvals it used. No approval "
            "is taken from the feed until %d (%d s: the approval lifetime and clock skew), "
            "when every such approval has expired.",
            head.seq,
            head.hash[:16],
            own.seq,
            since + self._hold_s,
            since + self._hold_s - now,
        )

    def _warn_if_behind(self, after: int, head: int | None) -> None:
        if head is None or head >= after or head == self._behind_warned:
            return
        self._behind_warned = head
        _log.warning(
            "the checkpoint's feed %s ends at %d, before this executor's cursor %d: its "
            "database was restored from a backup, or reset. It raises its feed to the cursor "
            "when asked, so approvals it issues from now on come after it; any it issued "
            "since the restore with a seq at or below %d (only possible with its clock "
            "behind the old one's) are not delivered. Compare the two audit chains with "
            "`airlock audit reconcile`.",
            self._feed,
            head,
            after,
            after,
        )

    def _get(self, after: int, wait_s: float) -> FeedPage:
        wait = max(0, int(wait_s))
        params = {"after": after, "wait": wait, "limit": PAGE_LIMIT}
        deadline = self._mono() + wait + self._grace
        try:
            with (
                within(wait + self._grace),
                self._client.stream("GET", self._url, params=params) as response,
            ):
                status = response.status_code
                if status != 200:
                    # The page is read capped below; an error under the same deadline.
                    error = read_at_most(response, until=deadline, monotonic=self._mono)
                    check_auth(status, error, "GET /v1/feed")
                    raise Transient(f"HTTP {status} {error_code(status, error)}")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > _PAGE_MAX_BYTES:
                        raise Transient(f"feed page over {_PAGE_MAX_BYTES} bytes")
                    if self._mono() > deadline:
                        raise Transient(f"feed page not whole {self._grace:.0f} s after its wait")
        except httpx.HTTPError as exc:
            raise Transient(f"{type(exc).__name__}: {exc}") from None
        try:
            page = FeedPage.model_validate(loads_strict(bytes(body), max_bytes=_PAGE_MAX_BYTES))
        except Refused as exc:
            raise Transient(f"malformed feed page: {exc.code.value}") from None
        except pydantic.ValidationError:
            page = None
        if page is None or page.cursor < after:
            raise Transient("malformed feed page: want {items: [...], cursor >= after}")
        items = page.items
        if items and not _in_order(items[0], after, page.cursor):
            # Nothing on the page can be taken (a checkpoint that replays old items, a
            # malformed first item): answered as an empty page, the loop would ask again
            # at once and get it again, polling in a tight loop.
            raise Transient(f"feed page's first item is malformed or not after {after}")
        return page

    def _accept(self, after: int, page: FeedPage, *, hold: bool = False) -> Sequence[Delivery]:
        """Record the page's revocations (and the checkpoint's head) and hand over its
        approvals; with ``hold``, hand over none and leave the cursor before them."""
        approvals: list[tuple[int, bytes]] = []
        revoked: list[_Revocation] = []
        last, end = after, page.cursor
        for item in page.items:
            if item is None or not _in_order(item, last, end):
                # Out of order or malformed: stop here; the cursor stays before it.
                _log.error("feed item after %d is malformed or out of order; page cut", last)
                end = last
                break
            seq = last = item.seq
            kind, approval_id = item.kind, item.approval_id
            if kind == "revocation":
                if isinstance(approval_id, str) and _APPROVAL_ID.fullmatch(approval_id):
                    revoked.append(_Revocation(seq, approval_id))
                else:
                    # No approval can carry such an id (its statement would not parse),
                    # so there is nothing to revoke; skipped like an unknown kind. Stored,
                    # it could fail the insert (the column holds 100) on every turn.
                    _log.warning(
                        "feed item %d: revocation of a malformed approval id %s ignored",
                        seq,
                        clip(ascii(approval_id), 120),
                    )
            elif kind == "approval" and item.has_bundle:
                # The bundle goes to the verifier as bytes; JCS keeps the exact base64
                # strings of action and payload, which is all the signature covers. A
                # bundle that is not even an object goes too: the verifier refuses it
                # and the refusal is recorded, rather than skipped with a log line.
                approvals.append((seq, canonical_bytes(item.bundle)))
            else:
                # Unknown kinds are recorded nowhere and skipped: the feed is not
                # authenticated, only what a bundle carries is.
                _log.warning("feed item %d of kind %s ignored", seq, clip(ascii(kind), 120))
        now = self._clock()
        # Only a page with items: an empty long-poll answer must not grow the chain.
        head = page.audit_head if page.items else None
        # The head of a page with approvals to hand over is recorded in the transaction
        # of the first one that commits (ack_in), not in a commit of its own.
        self._pending_head = head if approvals and not hold else None
        if approvals and not hold and not revoked:
            return self._deliveries(approvals, end)
        if not approvals and not revoked and head is None and end == after:
            return ()  # an empty answer: nothing to record, no commit
        # Revocations first: one in the same page as an approval can only help (E_REVOKED).
        with self._engine.begin() as conn:
            if revoked or head is not None:
                # The chain lock before the first row (AuditLog.lock): two executors
                # recording overlapping pages would otherwise each hold a revocation row
                # the other waits for while one of them waits for the chain. It also
                # serializes the read-compare-write of the recorded head below.
                AuditLog.lock(conn)
            if head is not None and self._pending_head is None:
                self._record_head(conn, head, now)
            for r in revoked:
                self._record_revocation(conn, r, now)
            if not approvals:
                advance_cursor(conn, self._feed, end, now)
                return ()
            if hold:
                return ()
        return self._deliveries(approvals, end)

    def _deliveries(self, approvals: list[tuple[int, bytes]], end: int) -> Sequence[Delivery]:
        """The page's approvals as deliveries, each with the cursor its ack may commit."""
        refs = [f"feed:{seq}" for seq, _ in approvals]
        ack_to = {
            ref: approvals[i + 1][0] - 1 if i + 1 < len(approvals) else end
            for i, ref in enumerate(refs)
        }
        with self._lock:
            self._page = _Page(refs, ack_to)
            self._moving.clear()
        return [Delivery(ref, raw) for ref, (_, raw) in zip(refs, approvals, strict=True)]

    def _record_head(self, conn: Connection, head: ChainHead, now: int) -> None:
        """Anchor the checkpoint's chain in ours: append ``executor.checkpoint_head`` when
        the head differs from the one last recorded for this feed.

        The head is the checkpoint's claim, unauthenticated like the rest of the page;
        recorded here it can no longer be changed without breaking our chain, so a later
        rewrite or cut of the checkpoint's chain is found by ``airlock audit reconcile``.
        """
        if self._store_head(conn, head, now):
            AuditLog.append(
                conn,
                {
                    "type": ExecutorEvent.CHECKPOINT_HEAD,
                    "feed": self._feed,
                    "seq": head.seq,
                    "hash": head.hash,
                },
                at=_at(now),
            )

    def _store_head(self, conn: Connection, head: ChainHead, now: int) -> bool:
        """Make ``head`` the one last recorded for this feed, unless it is already; say
        whether it changed (then the transaction's audit event must carry it). Call under
        the chain lock: the whole chain's serializes this read-compare-write; under a lane
        another executor's may interleave, and both then record the head."""
        params = {"feed": self._feed, "seq": head.seq, "hash": head.hash, "now": now}
        # One statement when the head moved, as it has on nearly every page; a second
        # only to tell a first head from the same one again.
        changed = bool(_HEAD_MOVE.rowcount(conn, params)) or (
            _HEAD_CREATE[conn.dialect.name].first(conn, params) is not None
        )
        if changed:
            _log.debug("checkpoint audit head %d recorded for %s", head.seq, self._feed)
        return changed

    def _record_revocation(self, conn: Connection, r: _Revocation, now: int) -> None:
        inserted = conn.execute(
            insert_ignore(conn, revocations)
            .values(approval_id=r.approval_id, feed=self._feed, feed_seq=r.seq, received_at=now)
            .returning(revocations.c.approval_id)
        ).first()
        if inserted is not None:
            AuditLog.append(
                conn,
                {
                    "type": ExecutorEvent.REVOCATION_RECEIVED,
                    "approval_id": r.approval_id,
                    "feed_seq": r.seq,
                },
                at=_at(now),
            )
            _log.info("revocation of %s recorded (feed seq %d)", r.approval_id, r.seq)

    def ack(self, delivery: Delivery) -> None:
        """The approval is recorded in the ledger: move the cursor past it (and record
        the page's head, if no acknowledgement has yet)."""
        with self._engine.begin() as conn:
            head = self.ack_in(conn, delivery).get("checkpoint_head")
            if isinstance(head, dict):  # no event of the bundle's here to carry it
                AuditLog.append(
                    conn, {"type": ExecutorEvent.CHECKPOINT_HEAD, **head}, at=_at(self._clock())
                )
        self.forget(delivery)

    def ack_in(self, conn: Connection, delivery: Delivery) -> Mapping[str, object]:
        """Acknowledge ``delivery`` in ``conn``'s transaction: the one that records the
        approval (its consume, or its refusal). Call :meth:`forget` once it committed.

        The cursor moves there past the page's leading run of committed approvals, this
        one counted as committed: past ``delivery`` itself when every approval before it
        on the page has committed, as it always has when they are executed one at a
        time, so the record and the cursor commit together or not at all. Executed side
        by side, one that commits before an earlier one moves the cursor no further than
        the earlier one; the earlier one's commit, or :meth:`settle`, takes it further.

        Until one such transaction has committed it, the page's checkpoint head is
        recorded there too: returned as the ``checkpoint_head`` field for that
        transaction's one audit event to carry (nothing when it is the head recorded
        last), where a page without approvals appends ``executor.checkpoint_head``.
        """
        now = self._clock()
        also: dict[str, object] = {}
        # The chain lock before the cursor's row lock, as everywhere (a no-op where the
        # transaction holds a lane or the whole chain already): the transaction appends
        # its event after this. Under lanes two executors sharing this feed, or two
        # deliveries of one page committing side by side, may both record the same head
        # (_store_head): a repeated event, checked twice.
        AuditLog.lock_lane(conn)
        with self._lock:
            head = self._pending_head
            page = self._page
            to = None if page is None else page.reach(delivery.ref)
            if page is not None and to is not None and to <= page.written:
                to = None  # a commit of this page has moved it as far already
        if head is not None and self._store_head(conn, head, now):
            also["checkpoint_head"] = {"feed": self._feed, "seq": head.seq, "hash": head.hash}
        if to is not None:
            advance_cursor(conn, self._feed, to, now)
            with self._lock:
                self._moving[delivery.ref] = to
        self._fp.hit("before_cursor_commit")
        return also

    def forget(self, delivery: Delivery) -> None:
        """The transaction that acknowledged ``delivery`` (:meth:`ack_in`) committed:
        count it as committed, and forget the page's head, which that commit recorded."""
        with self._lock:
            to = self._moving.pop(delivery.ref, None)
            page = self._page
            if page is not None and delivery.ref in page.ack_to:
                page.done.add(delivery.ref)
                if to is not None:
                    page.written = max(page.written, to)
            self._pending_head = None

    def settle(self) -> None:
        """Once every delivery of the page has committed or failed: move the cursor past
        the page's leading run of committed approvals, if their commits, made side by
        side, left it short (a transaction of its own; none when they did not)."""
        with self._lock:
            page = self._page
            to = None if page is None else page.reach()
            if page is None or to is None or to <= page.written:
                return
        with self._engine.begin() as conn:
            AuditLog.lock_lane(conn)  # the chain lock before the cursor's row, as everywhere
            advance_cursor(conn, self._feed, to, self._clock())
        with self._lock:
            page.written = max(page.written, to)
