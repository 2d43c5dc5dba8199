"""Recovery and the executor's run loop.

Recovery (DESIGN §2.5) finds ledger rows whose lease expired, takes each over with an
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
next pass; the rest of the pass goes on.

It never blind-retries a write. The loop runs recovery at start and then periodically,
and drains a :class:`~services.executor.sources.BundleSource` in between.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Container
from typing import TYPE_CHECKING

from sqlalchemy.exc import DBAPIError

from . import ledger
from .errors import Fenced
from .models import Outcome, State
from .sources import BundleSource

if TYPE_CHECKING:
    from .service import Executor

__all__ = ["drain", "recover_expired", "run"]

_log = logging.getLogger("airlock.executor")


def recover_expired(
    executor: Executor, *, revoked: Container[str] = frozenset(), limit: int = 100
) -> list[Outcome]:
    """One recovery pass over at most ``limit`` expired rows."""
    executor.trusted_keys()  # unreadable keys stop the pass before any take-over
    now = executor.clock()
    with executor.engine.begin() as conn:
        rows = ledger.expired(conn, now, limit)
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


def drain(executor: Executor, source: BundleSource, *, wait_s: float = 0.0) -> list[Outcome]:
    """Execute every bundle the source has now; acknowledge each once it is recorded."""
    outcomes: list[Outcome] = []
    for delivery in source.receive(wait_s=wait_s):
        outcome = executor.execute(delivery.raw, revoked=source.revoked())
        # Whatever the outcome, it is in the ledger (or refusals) now; re-delivery would
        # only be refused as a replay.
        source.ack(delivery)
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
    outcomes = recover_expired(executor, revoked=source.revoked())
    if once:
        # A source hands over a batch at a time (a directory backlog): all it has now.
        while batch := drain(executor, source):
            outcomes += batch
        return outcomes
    outcomes += drain(executor, source)
    last_recovery = executor.clock()
    while not stop.is_set():
        drained = drain(executor, source, wait_s=poll_wait_s)
        if not drained:
            # A source without long-poll returns at once; pace the loop here.
            stop.wait(poll_wait_s)
        if executor.clock() - last_recovery >= recover_every_s:
            recover_expired(executor, revoked=source.revoked())
            last_recovery = executor.clock()
    return outcomes
