"""The executor's daemon loop: recovery, the bundle source, the outcome outbox, a heartbeat.

:func:`serve` runs recovery at start and every ``recover_every_s`` seconds, takes bundles
from a :class:`~services.executor.sources.BundleSource` (the checkpoint feed long-polls;
a directory is looked at every 0.1 s while it waits), executes each (several at once with
``parallel``, in order for each resource), acknowledges it once recorded, and lets the
:class:`~services.executor.outbox.OutboxReporter` deliver receipts — with the feed as the
source, only once it has answered, so the ledger was checked against it first. It
touches a heartbeat file on every turn, so a health check can tell a live loop from a
wedged one. Each step
of a turn (the source, recovery, receipt delivery) has its own fault handling: a fault
that persists in one, such as a feed item that cannot be stored or a missing
trusted-keys file, must not stop the others.

Stopping (SIGINT/SIGTERM through :class:`Shutdown`): a signal that arrives while the loop
waits — on the long-poll, a POST, a backoff — ends the wait at once; one that arrives
while items are being executed or recorded lets those items finish, and the loop stops
before the next. Nothing here is needed for safety: a SIGKILL at any instant leaves
transactions that the database rolls back and rows that recovery finishes. It must never
swallow :class:`~services.executor.errors.CheckpointUnauthorized`: a wrong token is fixed
by a person, not by retrying.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Final

from airlock.heartbeat import Heartbeat, heartbeat_age

from ._http import Backoff
from .errors import CheckpointUnauthorized, LedgerHeld
from .models import Outcome
from .outbox import OutboxReporter
from .parallel import Parallel
from .recover import check_ledger, execute_delivery, ledger_checked, recover_expired
from .service import Executor
from .sources import AckInTransaction, BundleSource, Delivery

__all__ = ["Heartbeat", "Interrupted", "Shutdown", "heartbeat_age", "serve"]

_log = logging.getLogger("airlock.executor")


class Interrupted(BaseException):
    """Raised by :class:`Shutdown` inside an idle wait. A BaseException, so no
    ``except Exception`` in a library on the way up can swallow it."""


class Shutdown:
    """A stop request from a signal, honoured at once only inside :meth:`idle` regions."""

    def __init__(self) -> None:
        self.requested = False
        self.signum: int | None = None
        self._idle = 0

    def install(self) -> None:
        """Handle SIGTERM and SIGINT (main thread only)."""
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        self.requested = True
        self.signum = signum
        if self._idle:
            raise Interrupted

    def request(self) -> None:
        self.requested = True

    @contextmanager
    def idle(self) -> Iterator[None]:
        """Mark a wait that may be abandoned (no transaction is open inside it)."""
        if self.requested:
            raise Interrupted
        self._idle += 1
        try:
            yield
        finally:
            self._idle -= 1

    def sleep(self, seconds: float) -> None:
        with self.idle():
            time.sleep(seconds)  # idle wait; a SIGTERM interrupts it (Interrupted)


#: An outcome's log level: an in_doubt waits for a person (loud), a write that failed or
#: an approval refused is worth a look, the rest is routine.
_LEVELS: dict[str | None, int] = {
    "in_doubt": logging.ERROR,
    "failed": logging.WARNING,
    None: logging.WARNING,
}


def _show(outcome: Outcome, ref: str) -> None:
    _log.log(
        _LEVELS.get(outcome.state, logging.INFO),
        "%s %s: %s %s %s",
        ref,
        outcome.approval_id or "-",
        outcome.state or "refused",
        outcome.refusal_code or "",
        outcome.detail,
    )


def _drain(
    executor: Executor,
    source: BundleSource,
    shutdown: Shutdown,
    wait_s: float,
    *,
    on_outcome: Callable[[Outcome], None] | None,
    parallel: Parallel | None,
) -> int:
    deliveries = source.receive(wait_s=wait_s)
    held, failed = threading.Event(), threading.Event()
    shown = threading.Lock()

    def one(delivery: Delivery) -> bool:
        # Once one has failed or met a hold, the page's other runs take nothing more: the
        # cursor stays before that one, and what they executed after it would be
        # delivered again next turn.
        if shutdown.requested or held.is_set() or failed.is_set():
            return False  # not acknowledged: delivered again after the restart or the hold
        try:
            outcome = execute_delivery(executor, source, delivery)
        except LedgerHeld as exc:
            _log.warning("%s: %s; left where it is", delivery.ref, exc)
            held.set()
            return False
        except BaseException:
            failed.set()
            raise
        _show(outcome, delivery.ref)
        if on_outcome is not None:
            with shown:
                on_outcome(outcome)
        return True

    if parallel is None:
        n = _one_by_one(deliveries, one)
    else:
        try:
            n = parallel.run(deliveries, one)
        finally:
            if isinstance(source, AckInTransaction):
                source.settle()
    if held.is_set():
        # Not acknowledged: delivered again once the hold is over. A source hands it over
        # again at once (an inbox's file is still there), so wait the poll here, idle, or
        # the loop would retry it as fast as it can for the hold.
        shutdown.sleep(wait_s)
    return n


def _one_by_one(deliveries: Sequence[Delivery], one: Callable[[Delivery], bool]) -> int:
    """Call ``one`` on each delivery in order until it returns False; how many returned True."""
    for n, delivery in enumerate(deliveries):
        if not one(delivery):
            return n
    return len(deliveries)


def _recover(executor: Executor, source: BundleSource) -> int:
    outcomes = recover_expired(
        executor, revoked=source.revoked(), continue_claimed=ledger_checked(source)
    )
    for outcome in outcomes:
        _show(outcome, "recovered")
    return len(outcomes)


def _check(source: BundleSource) -> int:
    check_ledger(source)
    return 0


def _step(what: str, step: Callable[[], int]) -> int | None:
    """One step of a turn; a database, network or key-file fault is logged and gives None.

    Each step has its own, so a fault that persists in one (a feed item the ledger
    cannot store, a bundle source that keeps failing, a missing trusted-keys file) never
    starves the others: recovery and receipt delivery go on while the feed is stuck.
    """
    try:
        return step()
    except CheckpointUnauthorized:
        raise
    except Exception:  # a database or network fault: keep going, never crash
        _log.exception("%s failed", what)
        return None


class _Courier:
    """Receipt delivery on a thread of its own, so that no POST to the checkpoint holds up
    the execute loop: woken after each turn that recorded outcomes, and every
    :data:`_COURIER_TICK_S` for retries and sweeps that fall due.

    Its ``reporter`` must not wait in :meth:`Shutdown.idle` (a signal would then
    interrupt the loop's thread mid-item); its faults are logged and retried after the
    reporter's own backoff, except :class:`CheckpointUnauthorized`, kept for the loop to
    raise (a wrong token is fixed by a person).
    """

    def __init__(self, reporter: OutboxReporter, may_deliver: Callable[[], bool]) -> None:
        self._reporter = reporter
        self._may_deliver = may_deliver
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.unauthorized: CheckpointUnauthorized | None = None
        self._thread = threading.Thread(target=self._run, name="airlock-outbox", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        """Ask the thread to stop, and wait for a delivery in flight (its own deadline)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=_COURIER_JOIN_S)

    def _run(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(timeout=_COURIER_TICK_S)
            self._wake.clear()
            if self._stop.is_set() or not (woken or self._reporter.due()):
                continue
            if not self._may_deliver():
                continue
            try:
                self._reporter.flush()
            except CheckpointUnauthorized as exc:
                self.unauthorized = exc
                return
            except Exception:  # a database or network fault: logged, tried again when due
                _log.exception("receipt delivery failed")
                self._stop.wait(_COURIER_TICK_S)


def _deliver(
    courier: _Courier | None,
    reporter: OutboxReporter | None,
    done: int,
    may_deliver: Callable[[], bool],
) -> bool:
    """A turn's receipts: the courier woken if ``done`` recorded any, or the reporter
    flushed in the loop; True if that delivery failed. Raises the courier's
    :class:`CheckpointUnauthorized`."""
    if courier is not None:
        if courier.unauthorized is not None:
            raise courier.unauthorized
        if done:
            courier.wake()
        return False
    if reporter is not None and (done or reporter.due()) and may_deliver():
        return _step("receipt delivery", reporter.flush) is None
    return False


def _start(
    executor: Executor,
    source: BundleSource,
    shutdown: Shutdown,
    errors: Backoff,
    *,
    reporter: OutboxReporter | None,
    may_deliver: Callable[[], bool],
) -> None:
    """Check the ledger against the checkpoint, then recover, retried until recovery
    runs, delivering receipts (through ``reporter``, if any, once ``may_deliver``) on
    every attempt."""
    _step("checking the ledger against the checkpoint", lambda: _check(source))
    while True:
        recovered = _step("recovery at start", lambda: _recover(executor, source))
        if reporter is not None and may_deliver():
            _step("receipt delivery at start", reporter.flush)
        if recovered is not None:
            break
        delay = errors.failure()
        _log.warning("recovery at start failed; retrying in %.1fs", delay)
        shutdown.sleep(delay)
    errors.reset()


#: How often the courier asks whether a retry or a sweep is due, when not woken.
_COURIER_TICK_S: Final = 0.5
#: How long a stop waits for a delivery in flight (each POST has its own deadline).
_COURIER_JOIN_S: Final = 15.0


def serve(
    executor: Executor,
    source: BundleSource,
    *,
    shutdown: Shutdown,
    reporter: OutboxReporter | None = None,
    deliver_apart: bool = False,
    poll_wait_s: float = 5.0,
    recover_every_s: float = 30.0,
    heartbeat: Heartbeat | None = None,
    error_backoff: Backoff | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    on_outcome: Callable[[Outcome], None] | None = None,
    parallel: int = 1,
) -> None:
    """Run until ``shutdown`` is requested (see the module docstring). With
    ``deliver_apart``, receipts are delivered on a thread of their own after the start
    (:class:`_Courier`), never inside a turn of the execute loop. With ``parallel`` over
    1, up to that many of a batch's bundles are executed at once, those naming one
    resource one after another in their order (:mod:`services.executor.parallel`).
    Raises ValueError for ``parallel`` outside 1..8."""
    pool = Parallel(parallel) if parallel != 1 else None
    beat = heartbeat or Heartbeat(None)
    errors = error_backoff or Backoff()
    long_poll = bool(getattr(source, "long_poll", False))
    told = False
    courier: _Courier | None = None

    def may_deliver() -> bool:
        nonlocal told
        if ledger_checked(source):
            return True
        if not told:
            _log.info("receipts wait until the checkpoint's feed has answered once")
            told = True
        return False

    try:
        # First, whether this ledger went back (a hold recorded before any recovery);
        # then recovery, retried like the loop (a database or checkpoint blip must not
        # end the process), with receipts delivered on every attempt (see below).
        _start(executor, source, shutdown, errors, reporter=reporter, may_deliver=may_deliver)
        if reporter is not None and deliver_apart:
            courier = _Courier(reporter, may_deliver)
            courier.start()
            reporter = None  # the loop below delivers nothing itself
        beat.beat()  # the first beat says: recovered at start, serving
        next_recovery = monotonic() + recover_every_s
        _log.info("executor %s serving", executor.worker_id)
        while not shutdown.requested:
            beat.beat()
            # A long poll never outlasts the time to the next recovery pass, so recovery
            # and the heartbeat keep their pace whatever the poll wait (a wait longer than
            # AIRLOCK_EXECUTOR_RECOVER_EVERY would put both off by as much).
            wait_s = max(0.0, min(poll_wait_s, next_recovery - monotonic()))
            drained = _step(
                "taking bundles from the source",
                functools.partial(
                    _drain,
                    executor,
                    source,
                    shutdown,
                    wait_s,
                    on_outcome=on_outcome,
                    parallel=pool,
                ),
            )
            failed = drained is None
            done = drained or 0
            if monotonic() >= next_recovery:
                recovered = _step("recovery", lambda: _recover(executor, source))
                if recovered is None:
                    failed = True  # due again next turn
                else:
                    done += recovered
                    next_recovery = monotonic() + recover_every_s
            # No receipt before the feed has answered once (the ledger checked against the
            # head it names): a restored ledger's first receipts, of what its recovery
            # settled, would move the checkpoint's record of our head onto the restored
            # chain, and the check would then find nothing to hold.
            failed = _deliver(courier, reporter, done, may_deliver) or failed
            if failed:
                delay = errors.failure()
                _log.warning("executor loop turn failed; next turn in %.1fs", delay)
                shutdown.sleep(delay)
                continue
            errors.reset()
            if not done and not long_poll:
                # A source that does not long-poll answers at once; pace the loop.
                shutdown.sleep(max(0.0, min(poll_wait_s, next_recovery - monotonic())))
    except Interrupted:
        pass
    finally:
        if courier is not None:
            courier.stop()
        if pool is not None:
            pool.close()
    _log.info("executor %s stopped (signal %s)", executor.worker_id, shutdown.signum)
