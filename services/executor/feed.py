"""The checkpoint side of the executor: the long-poll feed in, the outcome outbox out.

:class:`CheckpointFeedSource` implements the :class:`~services.executor.sources.BundleSource`
port over ``GET /v1/feed``. Delivery is **at least once**: the cursor lives in the
executor's own database and moves past an item only after the item is recorded — an
approval in the ledger or the refusals table, a revocation in ``executor_revocations``.
A crash in between redelivers the approval, and the ledger refuses it as ``E_REPLAY``:
the source never skips anything by local state that the ledger must judge.

Revocations are written to the database as they arrive and :class:`LedgerRevocations`
answers step 12 from there, so a revocation survives restarts, is shared by every
executor on one ledger, and is honoured even when it arrives before its approval.

A page with items also carries the checkpoint audit chain's head (``audit_head``), and
the transaction that records the page appends it to our chain as
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

:class:`OutboxReporter` posts the receipts of terminal outcomes (committed with the
outcome, in the ledger or the resolutions table) to ``POST /v1/outcomes`` and records
each accepted or permanently refused one in the insert-only ``executor_deliveries``;
terminal ledger rows are never touched. What is still to post is read from the
``executor_outbox`` queue, which the outcome's own transaction fills and the delivery's
empties, so a flush costs what is pending, not the size of the ledger; at start the
reporter re-queues anything the ledger, deliveries and resends show undelivered. The
checkpoint answers a repeated receipt with 200 (same answer), so a crash between the
POST and that record is harmless.

Delivery attempts are numbered: a receipt's own is attempt 1, and a rejected receipt is
posted again only as a later attempt that an operator asked for
(:mod:`services.executor.resend`, ``executor_resends``). Each attempt is recorded once,
under its number, and removes only its own queue row, so two executors sharing the
ledger neither record an attempt twice nor drop a resend queued meanwhile.

Neither class decides whether anything is executed, and neither ever writes to the cloud
or changes a ledger row. Each exchange with the checkpoint has a deadline from its start,
connect, status line and headers included (``_PAGE_GRACE_S``, ``_ANSWER_DEADLINE_S``). A
checkpoint that is down, misses a deadline or answers 5xx/429 is retried with a
capped exponential backoff; 401/403 raises :class:`CheckpointUnauthorized`. A receipt the
checkpoint fails alone (a 500 for it, the others accepted) backs off alone: receipts go
in queue order, but none waits behind another except a resolution behind its outcome.
"""

from __future__ import annotations

import logging
import random
import re
import ssl
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, Literal

import httpx
import pydantic
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from airlock import apiclient
from airlock.api import (
    OUTCOMES_PATH,
    REFUSALS_PATH,
    ChainHead,
    ExecutorHead,
    FeedItem,
    FeedPage,
    ReceiptReport,
)
from airlock.events import ExecutorEvent
from airlock.httpdeadline import within
from airlock.ledger import held_until, insert_ignore, reportable_refusal
from airlock.protocol import (
    APPROVAL_ID_PATTERN,
    BUNDLE_MAX_BYTES,
    Refused,
    canonical_bytes,
    loads_strict,
)
from airlock.store import AuditLog, read_transaction

from .errors import CheckpointUnauthorized
from .failpoints import Failpoints
from .models import (
    TERMINAL_STATES,
    checkpoint_head,
    deliveries,
    feed_cursor,
    ledger,
    ledger_holds,
    outbox,
    refusals,
    resends,
    resolutions,
    revocations,
)
from .sources import Delivery

__all__ = [
    "Backoff",
    "CheckpointFeedSource",
    "LedgerRevocations",
    "OutboxReporter",
    "checkpoint_client",
    "feed_name",
    "pending_receipts",
    "requeue_undelivered",
]

_log = logging.getLogger("airlock.executor.feed")

#: Items per feed page. A page is read whole, so this bounds memory: at most this many
#: bundles of at most 64 KiB each, plus the wrapper.
PAGE_LIMIT: Final = 20
_PAGE_MAX_BYTES: Final = PAGE_LIMIT * (2 * BUNDLE_MAX_BYTES) + 64 * 1024
_DETAIL_MAX: Final = 1000
#: How much of an answer other than a feed page is read: an error or an outcome's answer
#: is a small JSON object.
_ANSWER_MAX_BYTES: Final = 64 * 1024
#: Deadlines on a whole exchange with the checkpoint — connect, TLS handshake, request,
#: status line, headers and body — counted from its start. httpx's timeouts bound one
#: socket operation each, so a checkpoint (or a proxy) sending a byte now and then could
#: otherwise hold the executor's one feed request, or a receipt's POST, for ever. Each is
#: kept on the wire (:mod:`airlock.httpdeadline`: every socket operation gets at most
#: what is left) and between the chunks of the body on the source's own clock. An
#: exchange whose status line and headers (and, for a feed page, whole body) are not in
#: by then fails as a checkpoint that is down does: backed off, nothing recorded.
#: A feed request's: the long-poll's wait, then this long.
_PAGE_GRACE_S: Final = 15.0
#: A receipt POST's. The status decides; the body only explains it, and the part of it
#: that arrived in time is used if the deadline passes between two of its chunks.
_ANSWER_DEADLINE_S: Final = 15.0
#: Least time between two empty answers to a long-poll: a checkpoint (or a proxy) that
#: ignores ``wait`` and answers at once would otherwise be asked again and again as fast
#: as the network allows. The checkpoint itself waits at least a second.
_EMPTY_POLL_MIN_S: Final = 1.0
_MAX_BATCHES: Final = 20  # per flush, so a large backlog never starves the feed
#: Pages one ``receive`` reads on past pages that hand over no approval (revocations).
_PAGES_PER_RECEIVE: Final = 20
#: How long the feed is held when this ledger lacks the head the checkpoint recorded
#: from its receipts: the executor's default approval lifetime and clock skew
#: (``AIRLOCK_EXECUTOR_MAX_TTL`` + ``AIRLOCK_EXECUTOR_SKEW``); the CLI passes the settings.
DEFAULT_LEDGER_HOLD_S: Final = 15 * 60 + 30
#: While held, how often the feed is asked again (and the hold logged at most this often).
_HOLD_POLL_S: Final = 5.0
_HOLD_LOG_EVERY_S: Final = 60.0
_APPROVAL_ID: Final = re.compile(APPROVAL_ID_PATTERN)

Idle = Callable[[], AbstractContextManager[None]]


def _no_idle() -> AbstractContextManager[None]:
    return nullcontext()


def feed_name(base_url: str) -> str:
    """The cursor's key: a cursor means something only for one checkpoint's feed."""
    return base_url.rstrip("/")


def checkpoint_client(
    base_url: str,
    token: str,
    *,
    poll_wait_s: float,
    verify: ssl.SSLContext | Literal[True] = True,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """An HTTP client for the feed and the outcome API, with explicit timeouts.

    The read timeout outlasts the long-poll. Each socket operation is also cut to what is
    left of the deadline of the exchange under way (:func:`airlock.httpdeadline.within`,
    which the feed source and the outbox open around each request), so a checkpoint that
    sends its status line and headers, or anything else, a byte at a time holds no
    request past it.
    ``transport`` (for tests) replaces all of that, ``verify`` included.

    ``trust_env=False``: the bearer token is never routed through a proxy picked up from
    the environment, and ``SSL_CERT_FILE`` is not read either. TLS certificates and host
    names are always verified: against certifi's CA bundle (``verify=True``, httpx's
    default, said explicitly), or, for a checkpoint behind a private CA, against exactly
    the CA file the executor names (``AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE``, as
    :func:`airlock.tls.checkpoint_verify`'s context). There is no way to pass ``False``.
    """
    return apiclient.checkpoint_http(
        base_url,
        verify=verify,
        timeout=httpx.Timeout(connect=5.0, read=poll_wait_s + _PAGE_GRACE_S, write=10.0, pool=5.0),
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        trust_env=False,
        transport=transport,
    )


class Backoff:
    """Capped exponential backoff with jitter: 0.5 s, 1 s, 2 s, … up to ``cap``."""

    def __init__(
        self, *, base: float = 0.5, cap: float = 30.0, rng: Callable[[], float] = random.random
    ) -> None:
        if base <= 0 or cap < base:
            raise ValueError("backoff needs 0 < base <= cap")
        self._base, self._cap, self._rng = base, cap, rng
        self._failures = 0

    def failure(self) -> float:
        """Count a failure and return how long to wait before the next attempt."""
        delay = self.delay(self._failures)
        self._failures += 1
        return delay

    def delay(self, failures: int) -> float:
        """The wait after the ``failures + 1``-th failure in a row (this object counts
        nothing: the outbox keeps one count per receipt)."""
        delay = min(self._cap, self._base * 2.0 ** min(failures, 30))
        return delay * (0.5 + self._rng() / 2)  # jitter: several executors do not march

    def reset(self) -> None:
        self._failures = 0

    @property
    def failures(self) -> int:
        return self._failures


def _read_at_most(
    response: httpx.Response, *, until: float, monotonic: Callable[[], float]
) -> bytes:
    """At most ``_ANSWER_MAX_BYTES`` of an answer that is not a feed page, by ``until``
    (:func:`airlock.apiclient.read_at_most`): the status decides; this only explains it."""
    return apiclient.read_at_most(
        response, limit=_ANSWER_MAX_BYTES, until=until, monotonic=monotonic
    )


def _error_code(status: int, body: bytes) -> str:
    """The checkpoint's ``{"error": {"code": …}}``, or ``HTTP <status>``
    (:meth:`airlock.apiclient.Answer.error_code`)."""
    return apiclient.Answer(status, body).error_code()


def _check_auth(status: int, body: bytes, what: str) -> None:
    if status in (401, 403):
        raise CheckpointUnauthorized(status, _error_code(status, body), what)


class _Transient(Exception):
    """The checkpoint is unreachable or answered something worth retrying."""


class _Unavailable(_Transient):
    """Not about one receipt: no answer at all (connection refused, a timeout) or an
    answer for the whole server (502/503/504 from it or a proxy in front, 429)."""


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


def read_cursor(conn: Connection, feed: str) -> int:
    seq = conn.execute(sa.select(feed_cursor.c.seq).where(feed_cursor.c.feed == feed)).scalar()
    return 0 if seq is None else int(seq)


def advance_cursor(conn: Connection, feed: str, seq: int, now: int) -> None:
    """Move the cursor forward to ``seq`` (never back: another executor may be ahead)."""
    inserted = conn.execute(
        insert_ignore(conn, feed_cursor)
        .values(feed=feed, seq=seq, updated_at=now)
        .returning(feed_cursor.c.feed)
    ).first()
    if inserted is None:
        conn.execute(
            sa.update(feed_cursor)
            .where(feed_cursor.c.feed == feed, feed_cursor.c.seq < seq)
            .values(seq=seq, updated_at=now)
        )


@dataclass(frozen=True, slots=True)
class _Revocation:
    seq: int
    approval_id: str


def _in_order(item: FeedItem | None, last: int, end: int) -> bool:
    """Is ``item`` well formed, its ``seq`` after ``last`` and at most the page's cursor?"""
    return item is not None and last < item.seq <= end


class CheckpointFeedSource:
    """Approvals from the checkpoint's long-poll feed, in feed order, at least once."""

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
        idle: Idle = _no_idle,
        extra_revoked: Container[str] = frozenset(),
        monotonic: Callable[[], float] = time.monotonic,
        ledger_hold_s: int = DEFAULT_LEDGER_HOLD_S,
    ) -> None:
        if ledger_hold_s < 0:
            raise ValueError("ledger_hold_s must not be negative")
        self._engine = engine
        self._mono = monotonic
        self._hold_s = ledger_hold_s
        self._hold_logged_at: float | None = None
        #: The feed has answered in this process, so the ledger was checked against the
        #: head it names (see :meth:`check_ledger`): recovery may continue claimed rows.
        self.ledger_checked = False
        self._client = client
        self._clock = clock
        self._feed = feed or feed_name(str(client.base_url))
        self._backoff = backoff or Backoff()
        self._fp = failpoints or Failpoints.inert()
        self._sleep = sleep
        self._idle = idle
        self._revoked = LedgerRevocations(engine, extra_revoked)
        # delivery ref -> the cursor that acknowledging it commits
        self._ack_to: dict[str, int] = {}
        self._behind_warned: int | None = None  # the feed_head last warned about

    @property
    def feed(self) -> str:
        return self._feed

    def cursor(self) -> int:
        with read_transaction(self._engine) as conn:
            return read_cursor(conn, self._feed)

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
        except _Transient as exc:
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
                self._sleep(_HOLD_POLL_S)
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
        except _Transient as exc:
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
        self._hold_if_foreign(head, now)
        with read_transaction(self._engine) as conn:
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
        deadline = self._mono() + wait + _PAGE_GRACE_S
        try:
            with (
                within(wait + _PAGE_GRACE_S),
                self._client.stream("GET", "/v1/feed", params=params) as response,
            ):
                status = response.status_code
                if status != 200:
                    # The page is read capped below; an error under the same deadline.
                    error = _read_at_most(response, until=deadline, monotonic=self._mono)
                    _check_auth(status, error, "GET /v1/feed")
                    raise _Transient(f"HTTP {status} {_error_code(status, error)}")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > _PAGE_MAX_BYTES:
                        raise _Transient(f"feed page over {_PAGE_MAX_BYTES} bytes")
                    if self._mono() > deadline:
                        raise _Transient(
                            f"feed page not whole {_PAGE_GRACE_S:.0f} s after its wait"
                        )
        except httpx.HTTPError as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}") from None
        try:
            page = FeedPage.model_validate(loads_strict(bytes(body), max_bytes=_PAGE_MAX_BYTES))
        except Refused as exc:
            raise _Transient(f"malformed feed page: {exc.code.value}") from None
        except pydantic.ValidationError:
            page = None
        if page is None or page.cursor < after:
            raise _Transient("malformed feed page: want {items: [...], cursor >= after}")
        items = page.items
        if items and not _in_order(items[0], after, page.cursor):
            # Nothing on the page can be taken (a checkpoint that replays old items, a
            # malformed first item): answered as an empty page, the loop would ask again
            # at once and get it again, polling in a tight loop (seen in review).
            raise _Transient(f"feed page's first item is malformed or not after {after}")
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
                        _clip(ascii(approval_id), 120),
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
                _log.warning("feed item %d of kind %s ignored", seq, _clip(ascii(kind), 120))
        now = self._clock()
        # Only a page with items: an empty long-poll answer must not grow the chain.
        head = page.audit_head if page.items else None
        # Revocations first: one in the same page as an approval can only help (E_REVOKED).
        with self._engine.begin() as conn:
            if revoked or head is not None:
                # The chain lock before the first row (AuditLog.lock): two executors
                # recording overlapping pages would otherwise each hold a revocation row
                # the other waits for while one of them waits for the chain. It also
                # serializes the read-compare-write of the recorded head below.
                AuditLog.lock(conn)
            if head is not None:
                self._record_head(conn, head, now)
            for r in revoked:
                self._record_revocation(conn, r, now)
            if not approvals:
                advance_cursor(conn, self._feed, end, now)
                return ()
            if hold:
                return ()
        out: list[Delivery] = []
        for i, (seq, raw) in enumerate(approvals):
            ref = f"feed:{seq}"
            self._ack_to[ref] = approvals[i + 1][0] - 1 if i + 1 < len(approvals) else end
            out.append(Delivery(ref, raw))
        return out

    def _record_head(self, conn: Connection, head: ChainHead, now: int) -> None:
        """Anchor the checkpoint's chain in ours: append ``executor.checkpoint_head`` when
        the head differs from the one last recorded for this feed.

        The head is the checkpoint's claim, unauthenticated like the rest of the page;
        recorded here it can no longer be changed without breaking our chain, so a later
        rewrite or cut of the checkpoint's chain is found by ``airlock audit reconcile``.
        """
        last = conn.execute(
            sa.select(checkpoint_head.c.seq, checkpoint_head.c.hash).where(
                checkpoint_head.c.feed == self._feed
            )
        ).first()
        if last is not None and (last.seq, last.hash) == (head.seq, head.hash):
            return
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
        values = {"seq": head.seq, "hash": head.hash, "recorded_at": now}
        if last is None:
            conn.execute(checkpoint_head.insert().values(feed=self._feed, **values))
        else:
            conn.execute(
                sa.update(checkpoint_head)
                .where(checkpoint_head.c.feed == self._feed)
                .values(**values)
            )
        _log.debug("checkpoint audit head %d recorded for %s", head.seq, self._feed)

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
        """The approval is recorded in the ledger: move the cursor past it."""
        to = self._ack_to.pop(delivery.ref)
        self._fp.hit("before_cursor_commit")
        with self._engine.begin() as conn:
            advance_cursor(conn, self._feed, to, self._clock())


@dataclass(frozen=True, slots=True)
class PendingReceipt:
    kind: str  # outcome | resolution | refusal
    approval_id: str
    receipt: str
    queued_at: int  # with approval_id, its place in the queue
    attempt: int = 1  # 1, or the attempt a resend request queued

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.approval_id)


def _after(position: tuple[int, str] | None) -> sa.ColumnElement[bool]:
    if position is None:
        return sa.true()
    queued_at, approval_id = position
    return (outbox.c.queued_at > queued_at) | (
        (outbox.c.queued_at == queued_at) & (outbox.c.approval_id > approval_id)
    )


def _resend_pending(kind: str, approval_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """A resend of the receipt was requested and its attempt is not recorded yet."""
    recorded = deliveries.alias("recorded")
    return sa.exists().where(
        resends.c.kind == kind,
        resends.c.approval_id == approval_id,
        ~sa.exists().where(
            recorded.c.kind == resends.c.kind,
            recorded.c.approval_id == resends.c.approval_id,
            recorded.c.attempt == resends.c.attempt,
        ),
    )


def pending_receipts(
    conn: Connection, limit: int, *, after: Mapping[str, tuple[int, str]] | None = None
) -> list[PendingReceipt]:
    """Queued receipts, oldest first; a resolution only once the outcome it resolves was
    delivered, and not while that outcome is being sent again (the checkpoint replaces an
    in_doubt outcome by its resolution, and refuses it the other way round). Reads the
    outbox queue, never the whole ledger.

    ``after`` maps a kind to the (queued_at, approval_id) of the last receipt of that
    kind already seen, to read on past it (one pass through the queue per flush).
    """
    after = after or {}
    outcome_rows = conn.execute(
        sa.select(ledger.c.approval_id, ledger.c.receipt, outbox.c.queued_at, outbox.c.attempt)
        .select_from(outbox.join(ledger, ledger.c.approval_id == outbox.c.approval_id))
        .where(
            outbox.c.kind == "outcome",
            _after(after.get("outcome")),
            ledger.c.state.in_([s.value for s in TERMINAL_STATES]),
            ledger.c.receipt.is_not(None),
        )
        .order_by(outbox.c.queued_at, outbox.c.approval_id)
        .limit(limit)
    ).all()
    resolution_rows = conn.execute(
        sa.select(
            resolutions.c.approval_id, resolutions.c.receipt, outbox.c.queued_at, outbox.c.attempt
        )
        .select_from(outbox.join(resolutions, resolutions.c.approval_id == outbox.c.approval_id))
        .where(
            outbox.c.kind == "resolution",
            _after(after.get("resolution")),
            sa.exists().where(
                deliveries.c.kind == "outcome",
                deliveries.c.approval_id == resolutions.c.approval_id,
            ),
            ~_resend_pending("outcome", resolutions.c.approval_id),
        )
        .order_by(outbox.c.queued_at, outbox.c.approval_id)
        .limit(limit)
    ).all()
    refusal_rows = conn.execute(
        sa.select(refusals.c.approval_id, refusals.c.receipt, outbox.c.queued_at, outbox.c.attempt)
        .select_from(
            outbox.join(refusals, refusals.c.id == reportable_refusal(outbox.c.approval_id))
        )
        .where(outbox.c.kind == "refusal", _after(after.get("refusal")))
        .order_by(outbox.c.queued_at, outbox.c.approval_id)
        .limit(limit)
    ).all()
    return (
        [PendingReceipt("outcome", a, r, int(q), int(n)) for a, r, q, n in outcome_rows]
        + [PendingReceipt("resolution", a, r, int(q), int(n)) for a, r, q, n in resolution_rows]
        + [PendingReceipt("refusal", a, r, int(q), int(n)) for a, r, q, n in refusal_rows]
    )


def requeue_undelivered(conn: Connection) -> int:
    """Queue every receipt the ledger and deliveries show undelivered, or whose requested
    resend has no delivery record yet, and the outbox does not hold (a full scan: the
    reporter runs it once, at start). Returns how many.

    Not a refusal's first attempt: whether a refusal is reported is decided when it is
    recorded, by whether the ledger had consumed its approval then (see
    :func:`~airlock.ledger.refusal_to_report`), and only its queue row says so;
    the refusals recorded before executor migration 0007 are not reported."""

    def undelivered(kind: str, approval_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
        return ~sa.exists().where(
            deliveries.c.kind == kind, deliveries.c.approval_id == approval_id
        ) & ~sa.exists().where(outbox.c.kind == kind, outbox.c.approval_id == approval_id)

    # A resend whose attempt is neither recorded nor queued (its queue row lost, say).
    # Only a receipt's last resend can be: the next needs this one's attempt recorded.
    recorded = deliveries.alias("recorded")
    resent = sa.select(
        resends.c.kind, resends.c.approval_id, resends.c.requested_at, resends.c.attempt
    ).where(
        ~sa.exists().where(
            recorded.c.kind == resends.c.kind,
            recorded.c.approval_id == resends.c.approval_id,
            recorded.c.attempt == resends.c.attempt,
        ),
        ~sa.exists().where(
            outbox.c.kind == resends.c.kind, outbox.c.approval_id == resends.c.approval_id
        ),
    )
    queued = 0
    for what, columns, select in (
        (
            "outcome",
            ["kind", "approval_id", "queued_at"],
            sa.select(sa.literal("outcome"), ledger.c.approval_id, ledger.c.updated_at).where(
                ledger.c.state.in_([s.value for s in TERMINAL_STATES]),
                ledger.c.receipt.is_not(None),
                undelivered("outcome", ledger.c.approval_id),
            ),
        ),
        (
            "resolution",
            ["kind", "approval_id", "queued_at"],
            sa.select(
                sa.literal("resolution"), resolutions.c.approval_id, resolutions.c.decided_at
            ).where(undelivered("resolution", resolutions.c.approval_id)),
        ),
        ("resent", ["kind", "approval_id", "queued_at", "attempt"], resent),
    ):
        # RETURNING, not rowcount: psycopg reports -1 for INSERT … ON CONFLICT DO NOTHING.
        count = len(
            conn.execute(
                insert_ignore(conn, outbox)
                .from_select(columns, select)
                .returning(outbox.c.approval_id)
            ).all()
        )
        queued += count
        _log.debug("re-queued %d undelivered %s receipts", count, what)
    return queued


#: Answers that say "not now" rather than "never". These are about the whole server (a
#: proxy with the checkpoint down behind it, a rate limit): every receipt would get them.
_SERVER_NOT_NOW: Final = frozenset({429, 502, 503, 504})
#: These may be about this one receipt (a 500 from the checkpoint's handler, a request
#: timeout, too early): the receipt waits out its own backoff, the others go on.
_ITEM_NOT_NOW: Final = frozenset({408, 425})
#: The checkpoint's answer to a receipt for an approval it does not hold: it verified the
#: receipt, then found no such approval (``E_NOT_FOUND``, services/checkpoint/service.py),
#: and answers that receipt so every time it is sent. Its URL names another checkpoint
#: than the one that issued the approval, or it was restored from a backup taken before.
#: (A checkpoint older than ``POST /v1/refusals`` answers a refusal receipt 404 too.)
APPROVAL_UNKNOWN: Final = 404
#: Its code: a 404 without it (a proxy, a wrong path prefix) is no answer of the API's.
APPROVAL_UNKNOWN_CODE: Final = "E_NOT_FOUND"


def approval_unknown(http_status: int | None, error_code: str | None) -> bool:
    """Is this the checkpoint's answer that it holds no such approval (see above)?"""
    return http_status == APPROVAL_UNKNOWN and error_code == APPROVAL_UNKNOWN_CODE


#: The checkpoint's answer to a resolution receipt that contradicts the resolution a
#: person recorded there first (``airlock approvals resolve``): it kept the receipt and
#: shows the conflict on the proposal, and answers so every time it is sent
#: (services/checkpoint/service.py, ``_executor_resolution_after_person``).
RESOLUTION_CONFLICT_CODE: Final = "E_RESOLUTION_CONFLICT"


def resolution_contested(kind: str, http_status: int | None, error_code: str | None) -> bool:
    """Is this a resolution receipt the checkpoint holds another decision for?

    Any 409 for a resolution: ``E_RESOLUTION_CONFLICT`` (kept there, in conflict), or
    ``E_STATE`` from a checkpoint before it, which did not keep it ("an outcome is already
    recorded": a person resolved it there first), or another resolution of the approval
    already kept there. Sent again, it gets the same answer: the two records disagree,
    and what helps is a person checking the cloud, not a resend.
    """
    return kind == "resolution" and http_status == 409 and error_code is not None


#: Receipt failures in a row, within one flush, that pause every delivery as one
#: failure of the server would (a checkpoint whose database is down answers 500 to all).
_FAILURES_IN_A_ROW: Final = 3
#: Receipts whose own backoff is remembered (in memory). One forgotten is tried again
#: sooner than its backoff said, never lost or skipped.
_RETRY_MAX: Final = 1000


@dataclass(frozen=True, slots=True)
class _Retry:
    failures: int
    due: float  # monotonic


class OutboxReporter:
    """Delivers receipts to ``POST /v1/outcomes`` until each is accepted or refused.

    A receipt the checkpoint fails (a 500, say) waits out its own capped exponential
    backoff while the receipts behind it are delivered, so one it keeps failing blocks
    no other; receipts that are due for a retry are tried after the fresh ones. A
    checkpoint that cannot be reached, answers for the whole server (502/503/504, 429)
    or fails several receipts in a row ends the flush, and the next waits out one shared
    backoff: a down checkpoint gets a request per backoff, not one per receipt.
    """

    def __init__(
        self,
        *,
        engine: Engine,
        client: httpx.Client,
        clock: Callable[[], int],
        backoff: Backoff | None = None,
        failpoints: Failpoints | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        idle: Idle = _no_idle,
        sweep_every_s: float = 30.0,
        batch: int = 50,
    ) -> None:
        self._engine = engine
        self._client = client
        self._clock = clock
        self._backoff = backoff or Backoff()
        self._fp = failpoints or Failpoints.inert()
        self._mono = monotonic
        self._idle = idle
        self._sweep_every = sweep_every_s
        self._batch = batch
        self._next = 0.0  # monotonic time of the next flush that is due on its own
        self._requeued = False  # the start-up scan for receipts the queue lacks
        self._retry: dict[tuple[str, str], _Retry] = {}  # oldest first, at most _RETRY_MAX

    def due(self) -> bool:
        """Is a retry or a periodic sweep (for outcomes other processes wrote) due?"""
        return self._mono() >= self._next

    def flush(self) -> int:
        """Post pending receipts; return how many were recorded (delivered or rejected).

        Does nothing while the whole checkpoint's backoff is being waited out.
        """
        if self._backoff.failures and not self.due():
            return 0
        if not self._requeued:
            with self._engine.begin() as conn:
                queued = requeue_undelivered(conn)
            if queued:
                _log.info("re-queued %d undelivered receipts", queued)
            self._requeued = True
        budget = _MAX_BATCHES * self._batch  # POSTs per flush: the feed is not starved
        recorded, in_a_row = 0, 0

        def post(items: Iterable[PendingReceipt]) -> bool | None:
            """Post each in turn while the budget lasts: whether an outcome was recorded,
            or None once the flush must end."""
            nonlocal budget, recorded, in_a_row
            outcome_recorded = False
            for item in items:
                if budget <= 0:
                    break
                budget -= 1
                ok = self._attempt(item)
                if ok is None:
                    return None
                recorded += ok
                in_a_row = 0 if ok else in_a_row + 1
                if in_a_row >= _FAILURES_IN_A_ROW:
                    self._pause(f"{in_a_row} receipts in a row not delivered")
                    return None
                outcome_recorded |= bool(ok) and item.kind == "outcome"
            return outcome_recorded

        # One pass through the queue in order: fresh receipts are posted as they come,
        # those backing off are passed over, those due for a retry are posted last. A
        # resolution is read only once its outcome is delivered: when one was, read the
        # resolutions again (what was seen is not posted twice).
        after: dict[str, tuple[int, str]] = {}
        seen: set[tuple[str, str]] = set()

        def fresh(
            batch: Sequence[PendingReceipt], retries: list[PendingReceipt]
        ) -> Iterator[PendingReceipt]:
            """The batch's receipts not seen in this pass and not backing off, read as
            they are posted; those due for a retry go to ``retries``."""
            now = self._mono()
            for item in batch:
                after[item.kind] = (item.queued_at, item.approval_id)
                if item.key in seen:
                    continue
                seen.add(item.key)
                retry = self._retry.get(item.key)
                if retry is None:
                    yield item
                elif retry.due <= now:
                    retries.append(item)

        while True:
            retries: list[PendingReceipt] = []
            while budget > 0:
                with read_transaction(self._engine) as conn:
                    batch = pending_receipts(conn, self._batch, after=after)
                if not batch:
                    break
                outcome_recorded = post(fresh(batch, retries))
                if outcome_recorded is None:
                    return recorded
                if outcome_recorded:
                    after.pop("resolution", None)
            outcome_recorded = post(retries)
            if outcome_recorded is None:
                return recorded
            if budget <= 0:
                self._next = self._mono()  # more than one flush's worth: due again at once
                return recorded
            if not outcome_recorded:
                break
            after.pop("resolution", None)
        self._backoff.reset()
        # This pass read the whole queue: a receipt backing off that is no longer in it was
        # delivered by another executor sharing the ledger. Forget it, or its past due
        # time would make every later turn flush at once (seen in review).
        for key in [key for key in self._retry if key not in seen]:
            del self._retry[key]
        self._next = min([self._mono() + self._sweep_every, *(r.due for r in self._retry.values())])
        return recorded

    def _attempt(self, item: PendingReceipt) -> int | None:
        """Post one receipt: 1 recorded, 0 backing off on its own, None if the whole
        checkpoint is failing (the flush ends; the shared backoff is set)."""
        try:
            self._deliver(item)
        except _Unavailable as exc:
            self._pause(str(exc))
            return None
        except _Transient as exc:
            failures = self._retry.pop(item.key, _Retry(0, 0.0)).failures
            delay = self._backoff.delay(failures)
            if len(self._retry) >= _RETRY_MAX:
                del self._retry[next(iter(self._retry))]  # the oldest: retried sooner
            self._retry[item.key] = _Retry(failures + 1, self._mono() + delay)
            _log.warning(
                "%s receipt of %s not delivered (%s, attempt %d); retry in %.1fs, "
                "delivering the others meanwhile",
                item.kind,
                item.approval_id,
                exc,
                failures + 1,
                delay,
            )
            return 0
        self._retry.pop(item.key, None)
        self._backoff.reset()
        return 1

    def _pause(self, why: str) -> None:
        delay = self._backoff.failure()
        self._next = self._mono() + delay
        _log.warning(
            "receipts not delivered, checkpoint unavailable (%s); attempt %d, retrying in %.1fs",
            why,
            self._backoff.failures,
            delay,
        )

    def _deliver(self, item: PendingReceipt) -> None:
        try:
            body = ReceiptReport.of(item.receipt).to_json_bytes()
        except ValueError as exc:
            # Written by this executor as an envelope; one that no longer reads as one is
            # never sent (the checkpoint would refuse it) and waits, logged, for a person.
            raise _Transient(f"the stored receipt is {exc}") from None
        until = self._mono() + _ANSWER_DEADLINE_S
        # A refusal before the consume is a note on the proposal, never its outcome: the
        # checkpoint takes it at its own endpoint, which changes no proposal's state.
        path = REFUSALS_PATH if item.kind == "refusal" else OUTCOMES_PATH
        try:
            with (
                self._idle(),
                within(_ANSWER_DEADLINE_S),
                self._client.stream(
                    "POST",
                    path,
                    content=body,
                    headers={"Content-Type": "application/json"},
                ) as response,
            ):
                status = response.status_code
                answer = _read_at_most(response, until=until, monotonic=self._mono)
        except httpx.HTTPError as exc:
            # No answer: the checkpoint (or the way to it) is down, not this receipt.
            raise _Unavailable(f"{type(exc).__name__}: {exc}") from None
        _check_auth(status, answer, f"POST {path}")
        if status == 200:
            self._fp.hit("after_outcome_post")
            self._record(item, "delivered", status, None, "")
            _log.info(
                "%s receipt of %s delivered (attempt %d)", item.kind, item.approval_id, item.attempt
            )
        elif status in _SERVER_NOT_NOW or status < 400:
            # < 400 but not 200 (a redirect, say): the URL is wrong for every receipt.
            raise _Unavailable(f"HTTP {status} {_error_code(status, answer)}")
        elif status in _ITEM_NOT_NOW or status >= 500:
            raise _Transient(f"HTTP {status} {_error_code(status, answer)}")
        else:
            # The checkpoint will never take this receipt (unknown approval, a different
            # outcome already recorded, receipt key not trusted…): record why, move on.
            # Only an operator sends it again, once the cause is fixed (resend.py).
            code = _error_code(status, answer)
            text = answer.decode("utf-8", errors="replace")
            # As the code above: no NUL, no escape sequence. Stored in the ledger's
            # delivery record, the only copy of the answer: ``ascii()`` (not the shown
            # form, airlock.text) keeps it recoverable and keeps rows in one form.
            if not text.isprintable():
                text = ascii(text)[1:-1]
            self._record(item, "rejected", status, code, _clip(text))
            if approval_unknown(status, code):
                hint = (
                    "it has no such approval, so sending it there again cannot help; why "
                    "and what can: airlock executor receipts list %s"
                )
            elif resolution_contested(item.kind, status, code):
                hint = (
                    "it holds another decision for this in_doubt (a person resolved it "
                    "there), so sending it again cannot help: this ledger keeps its own; "
                    "check the cloud; what each record says: airlock executor receipts list %s"
                )
            else:
                hint = "once the cause is fixed: airlock executor receipts resend %s --by NAME"
            _log.error(
                "checkpoint refused the %s receipt of %s for good (attempt %d): HTTP %d %s; "
                + hint,
                item.kind,
                item.approval_id,
                item.attempt,
                status,
                code,
                item.approval_id,
            )

    def _record(
        self, item: PendingReceipt, status: str, http: int, code: str | None, detail: str
    ) -> None:
        with self._engine.begin() as conn:
            # Another executor on this ledger may have recorded this attempt already:
            # the first record stands. Only this attempt's queue row goes: a resend
            # queued since (the next attempt) must stay.
            conn.execute(
                insert_ignore(conn, deliveries).values(
                    kind=item.kind,
                    approval_id=item.approval_id,
                    attempt=item.attempt,
                    status=status,
                    http_status=http,
                    error_code=code,
                    detail=detail,
                    at=self._clock(),
                )
            )
            conn.execute(
                sa.delete(outbox).where(
                    outbox.c.kind == item.kind,
                    outbox.c.approval_id == item.approval_id,
                    outbox.c.attempt == item.attempt,
                )
            )


def _clip(text: str, limit: int = _DETAIL_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def delivery_records(engine: Engine) -> Iterator[dict[str, Any]]:
    """Every delivery record (one per attempt), oldest first (for operators and tests)."""
    with engine.connect() as conn:
        for row in conn.execute(sa.select(deliveries).order_by(deliveries.c.id)).mappings():
            yield dict(row)
