"""The outbox: the executor's receipts to the checkpoint, each until accepted or refused.

:class:`OutboxReporter` posts the receipts of terminal outcomes (committed with the
outcome, in the ledger or the resolutions table) and of refusals before the consume, up
to ``RECEIPTS_MAX`` a request, to ``POST /v1/receipts`` (one by one to ``POST
/v1/outcomes`` and ``POST /v1/refusals`` of a checkpoint without it, which is asked
again every ``BATCH_RETRY_S``), judges the answer
to each as the answer to its own POST, and records each accepted or permanently refused
one in the insert-only ``executor_deliveries``;
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

:class:`OutboxReporter` never decides whether anything is executed, never writes to the
cloud and never changes a ledger row. Each POST has a deadline from its start, connect,
status line and headers included (``answer_deadline_s``). A checkpoint that is down,
misses the deadline or answers 5xx/429 is retried with a capped exponential backoff;
401/403 raises :class:`~services.executor.errors.CheckpointUnauthorized`. A receipt the
checkpoint fails alone (a 500 for it, the others accepted) backs off alone: receipts go
in queue order, but none waits behind another except a resolution behind its outcome.
A batch's whole answer counts for each receipt in it: a 500 is each one's 500, a 503
or no answer the checkpoint's.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, TypedDict

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from airlock import apiclient
from airlock.api import (
    BODY_MAX_BYTES,
    OUTCOMES_PATH,
    RECEIPTS_MAX,
    RECEIPTS_PATH,
    REFUSALS_PATH,
    ReceiptAnswer,
    ReceiptAnswers,
    ReceiptReport,
    receipts_body,
)
from airlock.httpdeadline import within
from airlock.ledger import insert_ignore
from airlock.store import read_transaction

from ._http import (
    ANSWER_DEADLINE_S,
    ANSWER_MAX_BYTES,
    Backoff,
    Idle,
    Transient,
    Unavailable,
    check_auth,
    clip,
    error_code,
    no_idle,
)
from .failpoints import Failpoints
from .models import deliveries, outbox
from .receipt_queue import PendingReceipt, pending_receipts, requeue_undelivered

__all__ = [
    "APPROVAL_UNKNOWN",
    "APPROVAL_UNKNOWN_CODE",
    "BATCH_RETRY_S",
    "RESOLUTION_CONFLICT_CODE",
    "RETRY_MAX",
    "DeliveryRecord",
    "OutboxReporter",
    "approval_unknown",
    "delivery_records",
    "resolution_contested",
]

# The feed's logger, as before the outbox had its own module: operators filter on it.
_log = logging.getLogger("airlock.executor.feed")

_MAX_BATCHES: Final = 20  # per flush, so a large backlog never starves the feed
#: Seconds (monotonic) of one receipt a request to a checkpoint without ``POST
#: /v1/receipts`` before the endpoint is tried again: the checkpoint may be upgraded.
BATCH_RETRY_S: Final = 600.0


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
RETRY_MAX: Final = 1000


@dataclass(frozen=True, slots=True)
class _Retry:
    failures: int
    due: float  # monotonic


class OutboxReporter:
    """Delivers receipts to ``POST /v1/receipts`` until each is accepted or refused.

    A receipt the checkpoint fails (a 500, say) waits out its own capped exponential
    backoff while the receipts behind it are delivered, so one it keeps failing blocks
    no other; receipts that are due for a retry are tried after the fresh ones. A
    checkpoint that cannot be reached, answers for the whole server (502/503/504, 429)
    or fails several receipts in a row ends the flush, and the next waits out one shared
    backoff: a down checkpoint gets a request per backoff, not one per receipt.

    Each POST must be answered (status line and headers) within ``answer_deadline_s`` of
    its start; at most ``retry_max`` receipts' own backoffs are remembered; a request
    carries at most ``per_request`` receipts.
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
        idle: Idle = no_idle,
        sweep_every_s: float = 30.0,
        batch: int = 50,
        answer_deadline_s: float = ANSWER_DEADLINE_S,
        retry_max: int = RETRY_MAX,
        per_request: int = RECEIPTS_MAX,
    ) -> None:
        if answer_deadline_s <= 0 or retry_max <= 0:
            raise ValueError("answer_deadline_s and retry_max must be positive")
        if not 1 <= per_request <= RECEIPTS_MAX:
            raise ValueError(f"per_request must be 1 to {RECEIPTS_MAX}")
        self._per_request = per_request
        self._engine = engine
        self._deadline = answer_deadline_s
        self._retry_max = retry_max
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
        self._retry: dict[tuple[str, str], _Retry] = {}  # oldest first, at most retry_max
        self._unrecorded: list[dict[str, object]] = []  # answers the batch has not recorded
        # Each endpoint's URL joined to the client's base URL once, as httpx joins it: a
        # relative path is parsed and joined again on every request otherwise.
        self._urls = {
            path: client.build_request("POST", path).url
            for path in (OUTCOMES_PATH, REFUSALS_PATH, RECEIPTS_PATH)
        }
        self._batched = True  # until the checkpoint says it has no POST /v1/receipts
        self._batch_again_at = 0.0  # monotonic: then a flush tries POST /v1/receipts again
        self._batch_retried = False  # tried again, and not answered yet

    @property
    def backing_off(self) -> int:
        """How many receipts wait out their own backoff (remembered up to ``retry_max``)."""
        return len(self._retry)

    def due(self) -> bool:
        """Is a retry or a periodic sweep (for outcomes other processes wrote) due?"""
        return self._mono() >= self._next

    def flush(self) -> int:
        """Post pending receipts; return how many were recorded (delivered or rejected).

        Does nothing while the whole checkpoint's backoff is being waited out.
        """
        if self._backoff.failures and not self.due():
            return 0
        self._requeue_once()
        self._batches_again()
        budget = _MAX_BATCHES * self._batch  # POSTs per flush: the feed is not starved
        recorded, in_a_row = 0, 0

        def post(items: Iterable[PendingReceipt]) -> bool | None:
            """Post each in turn while the budget lasts: whether an outcome was recorded,
            or None once the flush must end."""
            try:
                return post_all(items)
            finally:
                self._commit_records()  # each batch's records in one transaction

        def post_all(items: Iterable[PendingReceipt]) -> bool | None:
            nonlocal budget, recorded, in_a_row
            outcome_recorded, queue = False, iter(items)
            while budget > 0:
                # One request for up to a batch's worth; one receipt each to a checkpoint
                # that takes them one at a time (and so stops at the first failures).
                size = min(budget, self._per_request if self._batched else 1)
                chunk = list(itertools.islice(queue, size))
                if not chunk:
                    break
                results = self._send(chunk)
                if len(results) < len(chunk):
                    # The checkpoint has no batch endpoint: the rest go one by one.
                    queue = itertools.chain(chunk[len(results) :], queue)
                    chunk = chunk[: len(results)]
                budget -= len(chunk)
                if None in results:
                    return None  # the whole checkpoint is failing: paused
                for item, ok in zip(chunk, results, strict=True):
                    recorded += bool(ok)
                    in_a_row = 0 if ok else in_a_row + 1
                    outcome_recorded |= bool(ok) and item.kind == "outcome"
                if in_a_row >= _FAILURES_IN_A_ROW:
                    self._pause(f"{in_a_row} receipts in a row not delivered")
                    return None
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
        # time would make every later turn flush at once.
        for key in [key for key in self._retry if key not in seen]:
            del self._retry[key]
        self._next = min([self._mono() + self._sweep_every, *(r.due for r in self._retry.values())])
        return recorded

    def _batches_again(self) -> None:
        """Post batches again once a checkpoint without them had ``BATCH_RETRY_S``."""
        if not self._batched and self._mono() >= self._batch_again_at:
            self._batched = self._batch_retried = True

    def _requeue_once(self) -> None:
        """At the first flush: queue what the ledger shows undelivered and the queue lacks."""
        if self._requeued:
            return
        with self._engine.begin() as conn:
            queued = requeue_undelivered(conn)
        if queued:
            _log.info("re-queued %d undelivered receipts", queued)
        self._requeued = True

    def _account(self, item: PendingReceipt, deliver: Callable[[], None]) -> int | None:
        """Deliver one receipt (``deliver`` posts it, or judges its answer): 1 recorded,
        0 backing off on its own, None if the whole checkpoint is failing (the flush
        ends; the shared backoff is set)."""
        try:
            deliver()
        except Unavailable as exc:
            self._pause(str(exc))
            return None
        except Transient as exc:
            failures = self._retry.pop(item.key, _Retry(0, 0.0)).failures
            delay = self._backoff.delay(failures)
            if len(self._retry) >= self._retry_max:
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

    def _send(self, chunk: Sequence[PendingReceipt]) -> list[int | None]:
        """Deliver ``chunk``: in one request each (``POST /v1/receipts``, cut to the
        checkpoint's body cap), or one by one to a checkpoint without it. What
        :meth:`_account` says of each receipt, in order; fewer than ``chunk`` when the
        checkpoint has no batch endpoint (the caller posts the rest one by one). Once
        the checkpoint is unavailable nothing more is posted: the rest are None too."""
        if not self._batched:
            return self._one_by_one(chunk)
        results: list[int | None] = []
        bodies: list[tuple[PendingReceipt, bytes]] = []
        size = 0

        def post() -> bool:
            """Post the receipts gathered, in one request; whether to go on."""
            nonlocal bodies, size
            answered = self._post_batch(bodies) if bodies else []
            bodies, size = [], 0
            if answered is None:
                return False  # fewer than asked: the caller posts the rest alone
            results.extend(answered)
            return None not in answered

        for item in chunk:
            try:
                body = ReceiptReport.of(item.receipt).to_batch_item(_KIND[item.kind])
            except ValueError as exc:
                # Written by this executor as an envelope; one that no longer reads as
                # one is never sent (the checkpoint would refuse it) and waits, logged.
                if not post():  # the answers stay in the chunk's order
                    break
                results.append(self._account(item, _raising(f"the stored receipt is {exc}")))
                continue
            if bodies and size + len(body) + 1 > _BATCH_BYTES and not post():
                break
            bodies.append((item, body))
            size += len(body) + 1
        else:
            post()
        return _paused(results, chunk) if None in results else results

    def _one_by_one(self, items: Sequence[PendingReceipt]) -> list[int | None]:
        """Post each to its own endpoint until the checkpoint is unavailable (the rest
        are then None, not posted)."""
        results: list[int | None] = []
        for item in items:
            results.append(self._account(item, functools.partial(self._deliver, item)))
            if results[-1] is None:
                return _paused(results, items)
        return results

    def _post_batch(
        self, bodies: Sequence[tuple[PendingReceipt, bytes]]
    ) -> list[int | None] | None:
        """Post receipts in one request; judge each one's answer as its own POST's. None:
        the checkpoint has no ``POST /v1/receipts`` (nothing was judged)."""
        items = [item for item, _ in bodies]
        what = f"POST {RECEIPTS_PATH}"
        content = receipts_body([body for _, body in bodies])
        try:
            status, answer = self._exchange(RECEIPTS_PATH, content, _BATCH_ANSWER_MAX)
        except httpx.HTTPError as exc:
            return self._each(items, Unavailable(f"{type(exc).__name__}: {exc}"))
        check_auth(status, answer, what)
        if status in (404, 405):
            # A checkpoint older than the endpoint: one receipt a request for a while
            # (the caller posts these again so, as the rest).
            _log.log(
                logging.DEBUG if self._batch_retried else logging.INFO,
                "the checkpoint has no %s; posting one receipt a request, trying it again in %.0fs",
                what,
                BATCH_RETRY_S,
            )
            self._batched = self._batch_retried = False
            self._batch_again_at = self._mono() + BATCH_RETRY_S
            return None
        if status == 200:
            try:
                answers = ReceiptAnswers.model_validate_json(answer).results
            except ValueError:
                answers = []
            if len(answers) != len(items):
                return self._each(items, Unavailable(f"HTTP 200 not an answer to {what}"))
            if self._batch_retried:
                _log.info("the checkpoint takes %s again; posting receipts in batches", what)
                self._batch_retried = False
            return [
                self._account(item, functools.partial(self._judge, item, a.status, _body(a)))
                for item, a in zip(items, answers, strict=True)
            ]
        if status in _SERVER_NOT_NOW or status < 400:
            return self._each(items, Unavailable(f"HTTP {status} {error_code(status, answer)}"))
        if status in _ITEM_NOT_NOW or status >= 500:
            # As a single POST's 5xx: each receipt waits out its own backoff.
            return self._each(items, Transient(f"HTTP {status} {error_code(status, answer)}"))
        # The batch as a whole refused (413, 422): each alone gets its own answer.
        return self._one_by_one(items)

    def _each(self, items: Sequence[PendingReceipt], exc: Exception) -> list[int | None]:
        """The same failure for every receipt of a request (one pause, if any)."""
        if isinstance(exc, Unavailable):
            self._pause(str(exc))
            return [None] * len(items)
        return [self._account(item, _raising(str(exc), type(exc))) for item in items]

    def _deliver(self, item: PendingReceipt) -> None:
        """Post one receipt to its own endpoint and judge the answer."""
        try:
            body = ReceiptReport.of(item.receipt).to_json_bytes()
        except ValueError as exc:
            # Written by this executor as an envelope; one that no longer reads as one is
            # never sent (the checkpoint would refuse it) and waits, logged, for a person.
            raise Transient(f"the stored receipt is {exc}") from None
        # A refusal before the consume is a note on the proposal, never its outcome: the
        # checkpoint takes it at its own endpoint, which changes no proposal's state.
        path = REFUSALS_PATH if item.kind == "refusal" else OUTCOMES_PATH
        try:
            status, answer = self._exchange(path, body, ANSWER_MAX_BYTES)
        except httpx.HTTPError as exc:
            # No answer: the checkpoint (or the way to it) is down, not this receipt.
            raise Unavailable(f"{type(exc).__name__}: {exc}") from None
        self._judge(item, status, answer)

    def _exchange(self, path: str, content: bytes, limit: int) -> tuple[int, bytes]:
        """POST ``content`` (JSON) to ``path``, the whole exchange within the answer
        deadline: the status and at most ``limit`` bytes of the answer. Raises
        ``httpx.HTTPError`` when there is no answer."""
        until = self._mono() + self._deadline
        with (
            self._idle(),
            within(self._deadline),
            self._client.stream(
                "POST",
                self._urls[path],
                content=content,
                headers={"Content-Type": "application/json"},
            ) as response,
        ):
            answer = apiclient.read_at_most(
                response, limit=limit, until=until, monotonic=self._mono
            )
            return response.status_code, answer

    def _judge(self, item: PendingReceipt, status: int, answer: bytes) -> None:
        """Record the checkpoint's answer to one receipt (``status``, and ``answer``: its
        body, or its item of a batch's as ``{"error": …}``), or raise to retry it."""
        path = REFUSALS_PATH if item.kind == "refusal" else OUTCOMES_PATH
        check_auth(status, answer, f"POST {path}")
        if status == 200:
            self._fp.hit("after_outcome_post")
            self._record(item, "delivered", status, None, "")
            _log.info(
                "%s receipt of %s delivered (attempt %d)", item.kind, item.approval_id, item.attempt
            )
        elif status in _SERVER_NOT_NOW or status < 400:
            # < 400 but not 200 (a redirect, say): the URL is wrong for every receipt.
            raise Unavailable(f"HTTP {status} {error_code(status, answer)}")
        elif status in _ITEM_NOT_NOW or status >= 500:
            raise Transient(f"HTTP {status} {error_code(status, answer)}")
        else:
            # The checkpoint will never take this receipt (unknown approval, a different
            # outcome already recorded, receipt key not trusted…): record why, move on.
            # Only an operator sends it again, once the cause is fixed (resend.py).
            code = error_code(status, answer)
            text = answer.decode("utf-8", errors="replace")
            # As the code above: no NUL, no escape sequence. Stored in the ledger's
            # delivery record, the only copy of the answer: ``ascii()`` (not the shown
            # form, airlock.text) keeps it recoverable and keeps rows in one form.
            if not text.isprintable():
                text = ascii(text)[1:-1]
            self._record(item, "rejected", status, code, clip(text))
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
        """Keep the checkpoint's answer for the batch's one transaction
        (:meth:`_commit_records`). Lost in a crash before it, the receipt is posted
        again, and the checkpoint answers a repeated receipt as it did the first time."""
        self._unrecorded.append(
            {
                "kind": item.kind,
                "approval_id": item.approval_id,
                "attempt": item.attempt,
                "status": status,
                "http_status": http,
                "error_code": code,
                "detail": detail,
                "at": self._clock(),
            }
        )

    def _commit_records(self) -> None:
        """Record the batch's delivery attempts, and empty their queue rows, in one
        transaction."""
        if not self._unrecorded:
            return
        records, self._unrecorded = self._unrecorded, []
        with self._engine.begin() as conn:
            # Each statement once for the whole batch (executemany). Another executor on
            # this ledger may have recorded an attempt already: the first record stands.
            # Only this attempt's queue row goes: a resend queued since (the next
            # attempt) must stay.
            conn.execute(insert_ignore(conn, deliveries), records)
            conn.execute(_DEQUEUE, records)


#: The ``kind`` of a queued receipt's item in ``POST /v1/receipts``: the endpoint that
#: takes it alone (a resolution is an outcome).
_KIND: Final = {"outcome": "outcome", "resolution": "outcome", "refusal": "refusal"}
#: A batch's items' bytes, at most: the checkpoint's body cap, less the wrapper's.
_BATCH_BYTES: Final = BODY_MAX_BYTES - 64
#: A batch's answer, read at most: a short answer per receipt, a refusal's message in it.
_BATCH_ANSWER_MAX: Final = 4 * ANSWER_MAX_BYTES


def _paused(results: list[int | None], items: Sequence[object]) -> list[int | None]:
    """``results`` for the first of ``items``, None for the rest: the checkpoint is
    unavailable, and what was not posted waits out the pause with it."""
    return results + [None] * (len(items) - len(results))


def _raising(message: str, kind: type[Exception] = Transient) -> Callable[[], None]:
    def fail() -> None:
        raise kind(message)

    return fail


def _body(answer: ReceiptAnswer) -> bytes:
    """A batch's answer to one receipt as its own endpoint's body would have been (what a
    rejected receipt's delivery record keeps): ``{"error": …}``, or nothing."""
    if answer.error is None:
        return b""
    error = {"code": answer.error.code, "message": answer.error.message}
    return json.dumps(
        {"error": error}, ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode("utf-8")


#: One attempt's queue row, by the fields of its delivery record.
_DEQUEUE: Final = sa.delete(outbox).where(
    outbox.c.kind == sa.bindparam("kind"),
    outbox.c.approval_id == sa.bindparam("approval_id"),
    outbox.c.attempt == sa.bindparam("attempt"),
)


class DeliveryRecord(TypedDict):
    """One row of ``executor_deliveries``: a delivery attempt the checkpoint answered."""

    id: int
    kind: str
    approval_id: str
    status: str
    http_status: int | None
    error_code: str | None
    detail: str
    at: int
    attempt: int


def delivery_records(engine: Engine) -> Iterator[DeliveryRecord]:
    """Every delivery record (one per attempt), oldest first (for operators and tests)."""
    with engine.connect() as conn:
        for row in conn.execute(sa.select(deliveries).order_by(deliveries.c.id)):
            yield DeliveryRecord(
                id=row.id,
                kind=row.kind,
                approval_id=row.approval_id,
                status=row.status,
                http_status=row.http_status,
                error_code=row.error_code,
                detail=row.detail,
                at=row.at,
                attempt=row.attempt,
            )
