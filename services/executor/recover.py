"""Recovery and the executor's run loop.

Recovery (docs/protocol.md#recovery) finds ledger rows whose lease expired, takes each over with an
epoch bump (so the previous owner's later writes match zero rows), and finishes it
verify-first:

* first, the stored bundle is verified again (steps 1–12) with the trusted keys, clock
  and revocations of now: a signing key or approval revoked, or an approval expired,
  since the consume stops the write here too;
* ``claimed`` — no write was attempted: refused if it no longer verifies; otherwise
  re-check the precondition against live state and continue the normal path.
* ``executing`` — a write may have happened: probe live state. Effect visible →
  ``succeeded`` (verified); ECS delete that still verifies and whose precondition
  still holds → re-issue with the same ``ClientToken``; otherwise → ``in_doubt``, for
  a human to resolve.

A row that fails on a database error or no longer parses is logged and left for the
next pass; the rest of the pass goes on. ``claimed`` rows are also left while a ledger
hold is in force (``executor_ledger_holds``: the ledger may have gone back, and the one
it was restored over may have written them) and, with a source that checks the ledger
against the checkpoint, until that check has been made (:func:`check_ledger`).

It never blind-retries a write. The loop runs recovery at start and then periodically,
and drains a :class:`~services.executor.sources.BundleSource` in between.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Container
from typing import TYPE_CHECKING

from sqlalchemy.exc import DBAPIError

from airlock import ledger

from .errors import Fenced, LedgerHeld
from .models import Outcome, State
from .sources import AckInTransaction, BundleSource, Delivery

if TYPE_CHECKING:
    from .service import Executor

__all__ = ["check_ledger", "drain", "ledger_checked", "recover_expired", "run"]

_log = logging.getLogger("airlock.executor")


def recover_expired(
    executor: Executor,
    *,
    revoked: Container[str] = frozenset(),
    limit: int = 100,
    continue_claimed: bool = True,
) -> list[Outcome]:
    """One recovery pass over at most ``limit`` expired rows. With ``continue_claimed``
    false (the ledger could not be checked against the checkpoint yet), and while a
    ledger hold is in force, ``claimed`` rows are left for a later pass."""
    executor.trusted_keys()  # unreadable keys stop the pass before any take-over
    now = executor.clock()
    with executor.engine.begin() as conn:
        rows = ledger.expired(conn, now, limit)
        held_until = ledger.held_until(conn)
    if not continue_claimed or (held_until is not None and now < held_until):
        # The ledger may have gone back (executor_ledger_holds): a `claimed` row in it may
        # be one the ledger it was restored over went on to write. It waits, untouched,
        # until every approval such rows could hold has expired; re-verified then, it is
        # refused. `executing` rows are only probed (a delete re-issued with its token).
        held = [r for r in rows if r.state is State.CLAIMED]
        if held:
            _log.warning(
                "%d claimed row(s) left for a later pass: %s",
                len(held),
                "the ledger is not checked against the checkpoint yet"
                if not continue_claimed
                else f"this ledger may have gone back (a hold is in force until {held_until})",
            )
        rows = [r for r in rows if r.state is not State.CLAIMED]
    outcomes: list[Outcome] = []
    for row in rows:
        try:
            work = executor.take_over(row)
            if work is None:
                continue  # another worker took it first
            _log.info("recovering %s from %s (epoch %d)", row.approval_id, row.state, work.epoch)
            refusal = executor.reverify(row, revoked)
            if row.state is State.CLAIMED:
                if refusal is not None:
                    outcome = executor.refuse_claimed(work, refusal)
                else:
                    outcome = executor.continue_claimed(work, revoked=revoked)
            else:
                reason = "recovered: the previous owner's lease expired"
                if refusal is not None:
                    reason += (
                        f"; not re-issued: the bundle no longer verifies"
                        f" ({refusal.code.value}: {refusal.detail})"
                    )
                outcome = executor.settle_executing(
                    work, reason, may_reissue=refusal is None, revoked=revoked
                )
        except Fenced as exc:
            _log.warning("%s", exc)
            continue
        except (DBAPIError, ValueError):
            # One row must not end the pass (a deadlock victim, a row that no longer
            # parses); it was not finished, so its lease expires again and a later pass
            # takes it over. Anything else (keys unreadable, a crash) ends the pass.
            _log.exception("recovery of %s failed; left for the next pass", row.approval_id)
            continue
        outcomes.append(outcome)
    return outcomes


def check_ledger(source: BundleSource) -> None:
    """Before the first recovery pass: if the source can tell whether this ledger went
    back (the checkpoint feed can), let it record a hold first, so that recovery does
    not continue a `claimed` row that a restored-over ledger already wrote."""
    check = getattr(source, "check_ledger", None)
    if check is not None:
        check()


def ledger_checked(source: BundleSource) -> bool:
    """May recovery continue ``claimed`` rows? Not until a source that can check the
    ledger against the checkpoint has read the feed once (a source that cannot: yes)."""
    return bool(getattr(source, "ledger_checked", True))


def execute_delivery(executor: Executor, source: BundleSource, delivery: Delivery) -> Outcome:
    """Execute ``delivery`` and acknowledge it once its outcome is recorded.

    A source whose acknowledgement is a database write (:class:`AckInTransaction`, the
    feed's cursor) makes it in the transaction that records the bundle, not in a commit
    of its own. Raises :class:`LedgerHeld` with nothing recorded or acknowledged.
    """
    in_tx = source if isinstance(source, AckInTransaction) else None
    also = None if in_tx is None else functools.partial(in_tx.ack_in, delivery=delivery)
    outcome = executor.execute(delivery.raw, revoked=source.revoked(), record_also=also)
    # Whatever the outcome, it is in the ledger (or refusals) now; re-delivery would
    # only be refused as a replay.
    if in_tx is None:
        source.ack(delivery)
    else:
        in_tx.forget(delivery)
    return outcome


def drain(executor: Executor, source: BundleSource, *, wait_s: float = 0.0) -> list[Outcome]:
    """Execute every bundle the source has now; acknowledge each once it is recorded."""
    outcomes: list[Outcome] = []
    for delivery in source.receive(wait_s=wait_s):
        outcome = execute_delivery(executor, source, delivery)
        _log.info(
            "%s: %s %s",
            delivery.ref,
            outcome.state or "refused",
            outcome.refusal_code or "",
        )
        outcomes.append(outcome)
    return outcomes


def run(
    executor: Executor,
    source: BundleSource,
    *,
    once: bool,
    recover_every_s: float = 30.0,
    poll_wait_s: float = 5.0,
    stop: threading.Event | None = None,
) -> list[Outcome]:
    """Recovery at start, then drain; with ``once``, stop there. Otherwise loop until
    ``stop`` is set, running recovery again every ``recover_every_s`` seconds."""
    stop = stop or threading.Event()
    check_ledger(source)
    outcomes = recover_expired(
        executor, revoked=source.revoked(), continue_claimed=ledger_checked(source)
    )
    if once:
        # A source hands over a batch at a time (a directory backlog): all it has now.
        try:
            while batch := drain(executor, source):
                outcomes += batch
        except LedgerHeld as exc:  # what is left stays with the source, unacknowledged
            _log.warning("%s", exc)
        return outcomes
    outcomes += drain(executor, source)
    last_recovery = executor.clock()
    while not stop.is_set():
        drained = drain(executor, source, wait_s=poll_wait_s)
        if not drained:
            # A source without long-poll returns at once; pace the loop here.
            stop.wait(poll_wait_s)
        if executor.clock() - last_recovery >= recover_every_s:
            recover_expired(
                executor, revoked=source.revoked(), continue_claimed=ledger_checked(source)
            )
            last_recovery = executor.clock()
    return outcomes
