"""Sending a receipt the checkpoint refused for good once more, on an operator's request.

The outbox (:class:`~services.executor.outbox.OutboxReporter`) records a receipt the
checkpoint refuses with a 4xx that is not "not now" as ``rejected`` and never posts it
again by itself: the refusal is about the receipt (its key not trusted yet, say), so a
retry would only be refused again. Once an operator has fixed the cause,
:func:`request_resend` queues a later **delivery attempt** of the same receipt:

- only a receipt whose last recorded attempt was ``rejected``, with no resend of it
  waiting, is sent again. A receipt the checkpoint accepted (``delivered``) never is;
  one never attempted or already queued is reported, not queued twice.
- it is all or nothing: one approval id that is unknown or has nothing rejected to send
  refuses the whole request (:class:`~services.executor.errors.ResendRefused`), and
  nothing is queued.
- it inserts one ``executor_resends`` row per receipt (UNIQUE per attempt: the claim,
  so two requests or two executors on one ledger cannot queue an attempt twice), the
  receipt's outbox row for that attempt, and one ``executor.receipt_resend_requested``
  event in the audit chain naming who asked, why, the receipt and the attempt it
  follows up — in one transaction, the chain lock taken first, like every writer here.

A receipt the checkpoint accepted is sent again only by :func:`request_redelivery`, an
operator's explicit request for a checkpoint restored from a backup (it lost outcomes
whose receipts were delivered before the restore): receipts whose last attempt was
``delivered`` at or after a time, or those of named approval ids. It is the same
request otherwise (all or nothing, UNIQUE per attempt, the chain lock first), recorded
in ``executor_resends`` as any resend and audited as
``executor.receipt_redelivery_requested`` (refused: ``executor.receipt_redelivery_refused``),
so a redelivery is never mistaken for a resend of a rejected receipt. The checkpoint
answers a receipt it still has with 200, the same answer; one for an approval it lost
is refused (404) and recorded ``rejected``, visible like any other.

It never changes a ledger row, a resolution or a receipt: the receipt posted is the
envelope the outcome committed, byte for byte. Delivery history is only ever added to
(``executor_deliveries`` holds one row per attempt), so a rejected attempt and the
accepted one that followed both stay visible (:func:`receipt_history`). Nothing here
talks to the checkpoint: the running executor delivers what was queued at its next
sweep, and a restarted one re-queues a resend whose queue row was lost.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from airlock.events import ExecutorEvent
from airlock.ledger import insert_ignore
from airlock.protocol import APPROVAL_ID_PATTERN
from airlock.store import AuditLog

from .errors import OperatorRefusal, ResendRefused, recordable
from .models import TERMINAL_STATES, deliveries, ledger, outbox, resends, resolutions
from .outbox import RESOLUTION_CONFLICT_CODE, approval_unknown, resolution_contested

__all__ = [
    "Attempt",
    "ReceiptHistory",
    "Resend",
    "ResendRequest",
    "check_requester",
    "plan_redelivery",
    "plan_resend",
    "receipt_history",
    "request_redelivery",
    "request_resend",
    "without_receipt",
]

#: An approval's receipts: its outcome (and a person's resolution of it) from the ledger,
#: and the first refusal of it before it was consumed (from the refusals table).
Kind = Literal["outcome", "resolution", "refusal"]
State = Literal["pending", "delivered", "rejected", "resend_pending"]

_KINDS: Final[tuple[Kind, ...]] = ("outcome", "resolution", "refusal")
_APPROVAL_ID: Final = re.compile(APPROVAL_ID_PATTERN)
_BY_MAX: Final = 128  # executor_resends.requested_by
_NOTE_MAX: Final = 2000
_CHUNK: Final = 500  # approval ids per IN (...): well under every bind-parameter limit


@dataclass(frozen=True, slots=True)
class Attempt:
    """One recorded delivery attempt of a receipt (a row of ``executor_deliveries``)."""

    attempt: int
    status: str  # delivered | rejected
    http_status: int | None
    error_code: str | None
    detail: str
    at: int

    def describe(self) -> str:
        answer = " ".join(str(x) for x in (self.http_status, self.error_code) if x is not None)
        return f"attempt {self.attempt} {self.status} ({answer or 'no answer recorded'})"


@dataclass(frozen=True, slots=True)
class ResendRequest:
    """One operator request to send a receipt again (a row of ``executor_resends``)."""

    attempt: int
    requested_by: str
    requested_at: int
    note: str


@dataclass(frozen=True, slots=True)
class ReceiptHistory:
    """One receipt (an approval's outcome or resolution) and every attempt to deliver it."""

    kind: Kind
    approval_id: str
    attempts: tuple[Attempt, ...]  # by attempt number
    resends: tuple[ResendRequest, ...]  # by attempt number

    @property
    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def waiting(self) -> ResendRequest | None:
        """The resend whose attempt is not recorded yet, if any (only the last can be)."""
        if self.resends and (self.last is None or self.last.attempt < self.resends[-1].attempt):
            return self.resends[-1]
        return None

    def follows(self, request: ResendRequest) -> Attempt | None:
        """The recorded attempt ``request`` followed up (the one before it)."""
        return next((a for a in self.attempts if a.attempt == request.attempt - 1), None)

    @property
    def state(self) -> State:
        if self.waiting is not None:
            return "resend_pending"
        if self.last is None:
            return "pending"
        return "delivered" if self.last.status == "delivered" else "rejected"

    @property
    def approval_unknown(self) -> bool:
        """Rejected by a checkpoint that has no such approval (feed.approval_unknown): sent
        to that checkpoint again, the receipt gets the same answer."""
        return (
            self.state == "rejected"
            and self.last is not None
            and approval_unknown(self.last.http_status, self.last.error_code)
        )

    @property
    def resolution_contested(self) -> bool:
        """A resolution the checkpoint answered 409: it holds another decision for the
        in_doubt (feed.resolution_contested); sent again, it gets the same answer."""
        return (
            self.state == "rejected"
            and self.last is not None
            and resolution_contested(self.kind, self.last.http_status, self.last.error_code)
        )

    @property
    def resolution_conflict_kept(self) -> bool:
        """Of those, one the checkpoint kept and shows as a conflict on the proposal."""
        return (
            self.resolution_contested
            and self.last is not None
            and self.last.error_code == RESOLUTION_CONFLICT_CODE
        )


@dataclass(frozen=True, slots=True)
class Resend:
    """A delivery attempt to queue: ``attempt`` follows up ``follows``, the receipt's last
    recorded attempt: ``rejected`` (a resend) or ``delivered`` (a redelivery)."""

    kind: Kind
    approval_id: str
    attempt: int
    follows: Attempt

    @property
    def redelivery(self) -> bool:
        return self.follows.status == "delivered"


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def _histories(conn: Connection, keys: Sequence[tuple[Kind, str]]) -> list[ReceiptHistory]:
    """The histories of ``keys`` (kind, approval id), in that order."""
    attempts: dict[tuple[str, str], list[Attempt]] = {key: [] for key in keys}
    requests: dict[tuple[str, str], list[ResendRequest]] = {key: [] for key in keys}
    ids = sorted({approval_id for _, approval_id in keys})
    for chunk in _chunks(ids):
        for row in conn.execute(
            sa.select(deliveries)
            .where(deliveries.c.approval_id.in_(chunk))
            .order_by(deliveries.c.attempt, deliveries.c.id)
        ):
            found = attempts.get((row.kind, row.approval_id))
            if found is not None:
                found.append(
                    Attempt(
                        int(row.attempt),
                        row.status,
                        row.http_status,
                        row.error_code,
                        row.detail,
                        int(row.at),
                    )
                )
        for row in conn.execute(
            sa.select(resends).where(resends.c.approval_id.in_(chunk)).order_by(resends.c.attempt)
        ):
            wanted = requests.get((row.kind, row.approval_id))
            if wanted is not None:
                wanted.append(
                    ResendRequest(
                        int(row.attempt), row.requested_by, int(row.requested_at), row.note
                    )
                )
    return [
        ReceiptHistory(key[0], key[1], tuple(attempts[key]), tuple(requests[key])) for key in keys
    ]


def _kind(kind: str) -> Kind:
    for known in _KINDS:
        if kind == known:
            return known
    raise ValueError(f"unknown receipt kind {kind!r} in the delivery tables")


def _receipts_of(
    conn: Connection, approval_ids: Sequence[str]
) -> dict[str, tuple[Kind, ...] | str]:
    """Per approval id: the kinds of receipt it has, or why it has none."""
    terminal = {s.value for s in TERMINAL_STATES}
    found: dict[str, tuple[Kind, ...] | str] = {}
    refused: set[str] = set()
    for chunk in _chunks(approval_ids):
        # A refusal has a receipt to deliver only if it was queued when it was recorded
        # (ledger.refusal_to_report): its queue row, or the delivery record that replaced
        # it, says so. Other refusals of the approval are the ledger's record only.
        for table in (outbox, deliveries):
            refused.update(
                conn.execute(
                    sa.select(table.c.approval_id)
                    .where(table.c.kind == "refusal", table.c.approval_id.in_(chunk))
                    .distinct()
                ).scalars()
            )
        rows = conn.execute(
            sa.select(ledger.c.approval_id, ledger.c.state, ledger.c.receipt).where(
                ledger.c.approval_id.in_(chunk)
            )
        ).all()
        resolved = set(
            conn.execute(
                sa.select(resolutions.c.approval_id).where(resolutions.c.approval_id.in_(chunk))
            ).scalars()
        )
        for approval_id, state, receipt in rows:
            if state not in terminal or receipt is None:
                found[approval_id] = f"no receipt yet: its ledger row is {state}"
            elif approval_id in resolved:
                found[approval_id] = ("outcome", "resolution")
            else:
                found[approval_id] = ("outcome",)
    unknown = (
        "unknown here: no ledger row, and no refusal of it reported (only the first "
        "refusal of an approval never consumed here is, and not a replay, nor a bundle "
        "whose signature did not verify)"
    )
    out: dict[str, tuple[Kind, ...] | str] = {}
    for approval_id in approval_ids:
        kinds = found.get(approval_id, unknown)
        if approval_id in refused:
            kinds = (*kinds, "refusal") if isinstance(kinds, tuple) else ("refusal",)
        out[approval_id] = kinds
    return out


def receipt_history(conn: Connection, approval_ids: Sequence[str] | None) -> list[ReceiptHistory]:
    """The delivery history of every receipt of ``approval_ids``, or, with None, of every
    receipt not delivered: rejected, waiting for a resend, or not attempted yet.

    An id with no receipt is left out (:func:`plan_resend` says why).
    """
    if approval_ids is not None:
        wanted: list[tuple[Kind, str]] = []
        for approval_id, kinds in _receipts_of(conn, list(dict.fromkeys(approval_ids))).items():
            if not isinstance(kinds, str):
                wanted += [(kind, approval_id) for kind in kinds]
        return _histories(conn, wanted)
    candidates = sa.union(
        sa.select(deliveries.c.kind, deliveries.c.approval_id).where(
            deliveries.c.status == "rejected"
        ),
        sa.select(resends.c.kind, resends.c.approval_id),
        sa.select(outbox.c.kind, outbox.c.approval_id),
    ).subquery()
    keys: list[tuple[Kind, str]] = [
        (_kind(kind), approval_id)
        for kind, approval_id in conn.execute(
            sa.select(candidates.c.kind, candidates.c.approval_id).order_by(
                candidates.c.approval_id, candidates.c.kind
            )
        )
    ]
    return [h for h in _histories(conn, keys) if h.state != "delivered"]


def without_receipt(conn: Connection, approval_ids: Sequence[str]) -> dict[str, str]:
    """Those of ``approval_ids`` that have no receipt here, each with why."""
    return {
        approval_id: why
        for approval_id, why in _receipts_of(conn, list(dict.fromkeys(approval_ids))).items()
        if isinstance(why, str)
    }


def _why_not(history: ReceiptHistory, *, sending: State = "rejected") -> str:
    """Why a receipt is not one to send again: a resend takes ``rejected`` receipts, a
    redelivery ``delivered`` ones (``sending``)."""
    what = f"{history.kind} receipt"
    waiting, last = history.waiting, history.last
    if waiting is not None:
        return (
            f"{what} is already queued again (attempt {waiting.attempt}, requested by "
            f"{waiting.requested_by})"
        )
    if last is None:
        return f"{what} is not delivered yet: its first attempt is still queued"
    if last.status == "delivered" and sending == "rejected":
        return (
            f"{what} was delivered ({last.describe()}); a delivered receipt is never sent "
            "again but by a redelivery, for a checkpoint restored from a backup"
        )
    if last.status == "rejected" and sending == "delivered":
        return f"{what} was rejected ({last.describe()}): that is a resend, not a redelivery"
    raise AssertionError(f"a {last.status} receipt can be sent again: {history}")


def _named(
    conn: Connection, approval_ids: Sequence[str]
) -> tuple[list[str], dict[str, tuple[Kind, ...] | str], dict[str, list[ReceiptHistory]]]:
    """``approval_ids`` once each, with their kinds of receipt (or why none) and their
    receipts' histories; :class:`ResendRefused` for none or a malformed one."""
    ids = list(dict.fromkeys(approval_ids))
    if not ids:
        raise ResendRefused(OperatorRefusal.E_INVALID, [("-", "no approval id given")])
    malformed = [
        (recordable(i), "not an approval id (apv_…)") for i in ids if not _APPROVAL_ID.fullmatch(i)
    ]
    if malformed:
        raise ResendRefused(OperatorRefusal.E_INVALID, malformed)
    kinds = _receipts_of(conn, ids)
    by_id: dict[str, list[ReceiptHistory]] = {i: [] for i in ids}
    for history in receipt_history(conn, ids):
        by_id[history.approval_id].append(history)
    return ids, kinds, by_id


def plan_resend(conn: Connection, approval_ids: Sequence[str] | None) -> list[Resend]:
    """What :func:`request_resend` would queue, read in ``conn``; changes nothing.

    ``approval_ids``: each one's rejected receipts (its outcome, its resolution or both);
    None: every rejected receipt. Raises :class:`ResendRefused` naming every id that is
    malformed, unknown or has nothing rejected to send.
    """
    if approval_ids is None:
        return [
            Resend(h.kind, h.approval_id, h.last.attempt + 1, h.last)
            for h in receipt_history(conn, None)
            if h.state == "rejected" and h.last is not None
        ]

    def rejected(histories: list[ReceiptHistory]) -> tuple[list[ReceiptHistory], Why]:
        return (
            [h for h in histories if h.state == "rejected"],
            lambda: "nothing rejected to send: " + "; ".join(map(_why_not, histories)),
        )

    return _plan_named(conn, approval_ids, rejected, OperatorRefusal.E_NOT_REJECTED)


#: Why a named approval has nothing to send, worked out only when it has not.
Why = Callable[[], str]


def _plan_named(
    conn: Connection,
    approval_ids: Sequence[str],
    pick: Callable[[list[ReceiptHistory]], tuple[list[ReceiptHistory], Why]],
    code: OperatorRefusal,
) -> list[Resend]:
    """The next attempt of each receipt ``pick`` takes from each named approval's
    histories; all or nothing: any id with none (``pick`` says why, asked only then: a
    history of a receipt it takes has no "why not") refuses with ``code``."""
    ids, kinds, by_id = _named(conn, approval_ids)
    problems: list[tuple[str, str]] = []
    plan: list[Resend] = []
    for approval_id in ids:
        why = kinds[approval_id]
        if isinstance(why, str):
            problems.append((approval_id, why))
            continue
        taken, why_none = pick(by_id[approval_id])
        if not taken:
            problems.append((approval_id, why_none()))
            continue
        plan += [Resend(h.kind, approval_id, h.last.attempt + 1, h.last) for h in taken if h.last]
    if problems:
        raise ResendRefused(code, problems)
    return plan


def check_requester(by: str, note: str) -> str:
    """``by`` stripped, if it and ``note`` can be recorded; else :class:`ResendRefused`
    naming the option at fault (for a caller to check its input before anything else)."""
    by = by.strip()
    problems = []
    if not by:
        problems.append(("--by", "a resend names who asked for it"))
    elif len(by) > _BY_MAX or not by.isprintable():
        problems.append(("--by", f"at most {_BY_MAX} printable characters"))
    if len(note) > _NOTE_MAX:
        problems.append(("--note", f"at most {_NOTE_MAX} characters"))
    if problems:
        raise ResendRefused(OperatorRefusal.E_INVALID, problems)
    return by


def _order(key: tuple[Kind, str]) -> tuple[str, int]:
    return (key[1], _KINDS.index(key[0]))


def _settled(
    conn: Connection, delivered: Sequence[ReceiptHistory], chosen: Sequence[ReceiptHistory]
) -> list[ReceiptHistory]:
    """``chosen`` without the outcomes a resolution settled, each replaced by that
    resolution when it was delivered (``delivered`` holds every delivered receipt a
    redelivery may pick from).

    The resolution says what became of the write; the in_doubt it settled, sent again to
    a restored checkpoint first, would land there as an open in_doubt on a proposal that
    has moved on (a lapsed one takes its target back, withdrawing a newer pending
    proposal) before the resolution closed it again. The checkpoint
    takes a resolution alone: it lands on a proposal with no outcome, or over its
    in_doubt.
    """
    ids = sorted({h.approval_id for h in chosen if h.kind == "outcome"})
    resolved: set[str] = set()
    for chunk in _chunks(ids):
        resolved.update(
            conn.execute(
                sa.select(resolutions.c.approval_id).where(resolutions.c.approval_id.in_(chunk))
            ).scalars()
        )
    picked = {(h.kind, h.approval_id): h for h in chosen}
    for h in chosen:
        if h.kind == "outcome" and h.approval_id in resolved:
            del picked[(h.kind, h.approval_id)]
            for d in delivered:
                if (d.kind, d.approval_id) == ("resolution", h.approval_id):
                    picked[(d.kind, d.approval_id)] = d
    return list(picked.values())


def plan_redelivery(
    conn: Connection, approval_ids: Sequence[str] | None, *, since: int | None = None
) -> list[Resend]:
    """What :func:`request_redelivery` would queue, read in ``conn``; changes nothing.

    Exactly one of ``approval_ids`` (each one's delivered receipts) and ``since`` (every
    receipt whose last recorded attempt was delivered at or after this Unix time, by the
    delivery records' clock: the executor's). Raises :class:`ResendRefused` naming every
    id that is malformed, unknown or has nothing delivered to send again.
    """
    if (approval_ids is None) == (since is None):
        raise ValueError("a redelivery names approval ids or a time, exactly one of them")
    if since is not None:
        keys = sorted(
            {
                (_kind(kind), approval_id)
                for kind, approval_id in conn.execute(
                    sa.select(deliveries.c.kind, deliveries.c.approval_id).where(
                        deliveries.c.status == "delivered", deliveries.c.at >= since
                    )
                )
            },
            key=_order,
        )
        # With each outcome its resolution, whenever that was delivered: it may go instead.
        settling: list[tuple[Kind, str]] = [("resolution", a) for k, a in keys if k == "outcome"]
        found = [h for h in _histories(conn, [*keys, *settling]) if h.state == "delivered"]
        recent = [h for h in found if h.last is not None and h.last.at >= since]
        queued = [
            Resend(h.kind, h.approval_id, h.last.attempt + 1, h.last)
            for h in _settled(conn, found, recent)
            if h.last is not None
        ]
        return sorted(queued, key=lambda r: _order((r.kind, r.approval_id)))
    assert approval_ids is not None  # for mypy: checked above

    def delivered(histories: list[ReceiptHistory]) -> tuple[list[ReceiptHistory], Why]:
        everything = [h for h in histories if h.state == "delivered"]

        def why() -> str:
            reasons = [_why_not(h, sending="delivered") for h in histories if h not in everything]
            if everything:
                reasons.append("its outcome was settled by its resolution, which goes instead")
            return "nothing delivered to send again: " + "; ".join(reasons)

        return _settled(conn, everything, everything), why

    return _plan_named(conn, approval_ids, delivered, OperatorRefusal.E_NOT_DELIVERED)


def request_resend(
    engine: Engine, approval_ids: Sequence[str] | None, *, by: str, note: str, now: int
) -> list[Resend]:
    """Queue the next delivery attempt of each rejected receipt of ``approval_ids`` (None:
    of every rejected receipt), recorded with who asked and audited; return what was
    queued (empty only when ``approval_ids`` is None and nothing is rejected).

    All or nothing: raises :class:`ResendRefused` (and queues nothing) for a malformed,
    unknown or not-rejected id, or a receipt another request queued meanwhile. The
    refusal is recorded in the audit chain (``executor.receipt_resend_refused``, with its
    code), as every refusal is.
    """
    return _request(
        engine,
        lambda conn: plan_resend(conn, approval_ids),
        approval_ids,
        {},
        (ExecutorEvent.RECEIPT_RESEND_REQUESTED, ExecutorEvent.RECEIPT_RESEND_REFUSED),
        by=by,
        note=note,
        now=now,
    )


def request_redelivery(
    engine: Engine,
    approval_ids: Sequence[str] | None,
    *,
    since: int | None = None,
    by: str,
    note: str,
    now: int,
) -> list[Resend]:
    """Queue the next delivery attempt of receipts the checkpoint **accepted**, for a
    checkpoint restored from a backup: each delivered receipt of ``approval_ids``, or
    (``since``) every receipt whose last attempt was delivered at or after that Unix
    time. Recorded with who asked and audited (``executor.receipt_redelivery_requested``,
    one per receipt); returns what was queued (empty only with ``since``, when nothing
    was delivered since).

    All or nothing, as :func:`request_resend`: a malformed, unknown or not-delivered id,
    or a receipt another request queued meanwhile, refuses the whole request
    (:class:`ResendRefused`, audited as ``executor.receipt_redelivery_refused``). A
    resolution queued with its outcome is posted only once the outcome's new attempt is
    recorded (:func:`~services.executor.receipt_queue.pending_receipts`).
    """
    return _request(
        engine,
        lambda conn: plan_redelivery(conn, approval_ids, since=since),
        approval_ids,
        {"delivered_since": since},
        (ExecutorEvent.RECEIPT_REDELIVERY_REQUESTED, ExecutorEvent.RECEIPT_REDELIVERY_REFUSED),
        by=by,
        note=note,
        now=now,
    )


#: At most this many approval ids and problems go into a refusal's audit event.
_RECORDED_IDS: Final = 50


def _request(
    engine: Engine,
    plan: Callable[[Connection], list[Resend]],
    approval_ids: Sequence[str] | None,
    extra: dict[str, int | None],
    events: tuple[ExecutorEvent, ExecutorEvent],
    *,
    by: str,
    note: str,
    now: int,
) -> list[Resend]:
    """Queue ``plan``'s attempts, audited as ``events[0]`` (requested); a refusal is
    audited as ``events[1]`` (refused) and raised."""
    try:
        return _queue(engine, plan, extra, events[0], by=by, note=note, now=now)
    except ResendRefused as exc:
        with engine.begin() as conn:
            AuditLog.append(
                conn,
                {
                    "type": events[1],
                    "code": exc.code.value,
                    "approval_ids": None
                    if approval_ids is None
                    else [recordable(i) for i in list(approval_ids)[:_RECORDED_IDS]],
                    **extra,
                    "by": recordable(by.strip()),
                    "problems": [
                        [recordable(subject), recordable(why, 500)]
                        for subject, why in exc.problems[:_RECORDED_IDS]
                    ],
                },
                at=datetime.fromtimestamp(now, UTC),
            )
        raise


def _queue(
    engine: Engine,
    plan_of: Callable[[Connection], list[Resend]],
    extra: dict[str, int | None],
    event: ExecutorEvent,
    *,
    by: str,
    note: str,
    now: int,
) -> list[Resend]:
    by = check_requester(by, note)
    with engine.begin() as conn:
        # The chain lock before anything is read: two requests are serialized, so the
        # second sees the first's resends and refuses instead of racing its inserts.
        AuditLog.lock(conn)
        plan = plan_of(conn)
        for r in plan:
            claimed = conn.execute(
                insert_ignore(conn, resends)
                .values(
                    kind=r.kind,
                    approval_id=r.approval_id,
                    attempt=r.attempt,
                    requested_by=by,
                    requested_at=now,
                    note=note,
                )
                .returning(resends.c.id)
            ).first()
            if claimed is None:  # the UNIQUE claim, should the lock ever not serialize us
                raise ResendRefused(
                    OperatorRefusal.E_CONFLICT,
                    [(r.approval_id, f"{r.kind} receipt attempt {r.attempt} was queued meanwhile")],
                )
            # A queue row left for this receipt can only be of an attempt already
            # recorded (a resend needs its predecessor recorded): replace it.
            conn.execute(
                sa.delete(outbox).where(
                    outbox.c.kind == r.kind, outbox.c.approval_id == r.approval_id
                )
            )
            conn.execute(
                sa.insert(outbox).values(
                    kind=r.kind, approval_id=r.approval_id, queued_at=now, attempt=r.attempt
                )
            )
            # The attempt followed up: rejected for a resend, delivered for a redelivery.
            follows: dict[str, int | str | None] = {
                "attempt": r.follows.attempt,
                "http_status": r.follows.http_status,
            }
            if r.redelivery:
                follows["at"] = r.follows.at
            else:
                follows["error_code"] = r.follows.error_code
            AuditLog.append(
                conn,
                {
                    "type": event,
                    "kind": r.kind,
                    "approval_id": r.approval_id,
                    "attempt": r.attempt,
                    "by": by,
                    "note": note,
                    **extra,
                    "delivered" if r.redelivery else "rejected": follows,
                },
                at=datetime.fromtimestamp(now, UTC),
            )
    return plan
