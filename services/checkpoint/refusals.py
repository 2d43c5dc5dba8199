"""What a refused request costs the audit chain: bounded rows, and a rate limit per token.

Every refusal of an authenticated caller has an audit record, but not a commit of its
own. :class:`RefusalRecorder` keeps a window per (caller, code):

* the first refusal of a window is written at once as a ``checkpoint.refused`` row of its
  own (``by``, ``role``, ``code``, ``request`` and ``proposal_id`` as before);
* every later one in the window is only counted in memory, and :meth:`flush` (the app's
  periodic task, every ``interval`` seconds, and once more at stop) writes one
  ``checkpoint.refused`` row per (caller, code) with ``count``, ``first_at``, ``last_at``
  (Unix seconds), ``interval`` and the ``requests`` (route templates) it counts, all in
  one transaction of its own;
* a window with nothing counted at a flush closes; the caller's next refusal with that
  code is written at once again.

So each refusal is counted in exactly one row (a row without ``count`` counts one), and a
flood from one caller adds two rows a code at first, then one an interval. The counts
not flushed yet live in this process only: a crash loses at most one interval of them
(the row written at once for each window is durable).

:class:`RefusalRecorder` also holds a token bucket per token: each refusal takes one;
a token with none left is refused ``E_RATE_LIMITED`` (429, ``Retry-After``) by the
routes' outermost middleware before anything else is done for it, and those refusals
are counted like any other (they take nothing from the bucket). Replicas on one
PostgreSQL database share each token's budget (``limits.RefusalBudgets``): a refusal
is also charged there, off the event loop, and a budget spent on one replica is copied
into every other's buckets by its listener, so the gate stays a dict lookup.

This module writes only ``checkpoint.refused`` rows, never in a decision's transaction,
and never holds its lock while it writes.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal, cast, get_args

from airlock.events import RefusedCounted, RefusedOnce

from .auth import Principal, Role
from .limits import RefusalBudgets

__all__ = ["REQUESTS_KEPT", "RefusalRecorder", "RefusedRequest"]

_log = logging.getLogger("airlock.checkpoint")

#: Distinct request templates an aggregated row lists (route templates are a fixed set).
REQUESTS_KEPT: Final = 16


@dataclass(frozen=True, slots=True)
class RefusedRequest:
    """One refused request of an authenticated caller, as recorded."""

    by: str
    role: str
    code: str
    request: str
    proposal_id: str | None = None

    def event(self) -> RefusedOnce:
        """The fields of its ``checkpoint.refused`` event (the writer adds ``type``)."""
        out: RefusedOnce = {
            "by": self.by,
            "role": self.role,
            "code": self.code,
            "request": self.request,
        }
        if self.proposal_id is not None:
            out["proposal_id"] = self.proposal_id
        return out


@dataclass(slots=True)
class _Window:
    role: str
    count: int = 0
    first_at: int = 0
    last_at: int = 0
    requests: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Bucket:
    principal: Principal
    tokens: float
    at: float


class RefusalRecorder:
    """Windows of refusals per (caller, code), and a refusal budget per token.

    Args:
        write_one: appends one ``checkpoint.refused`` event, given its fields, in a
            transaction of its own.
        write_many: appends several (counted refusals) in one transaction of its own.
        now: the checkpoint's clock (Unix seconds), for ``first_at``/``last_at``.
        interval: seconds between flushes (the app's task), written into each row.
        burst: refusals a token may have in a row before it is rate-limited.
        per_minute: refusals a token earns back each minute.
        monotonic: the clock of the token buckets (seconds).
        shared: the budgets in the database that replicas share (PostgreSQL): each
            charge is also taken there, and :meth:`adopt` copies a budget another
            replica spent into this one's buckets. None: this process's alone.
    """

    def __init__(
        self,
        *,
        write_one: Callable[[RefusedOnce], None],
        write_many: Callable[[list[RefusedCounted]], None],
        now: Callable[[], int],
        interval: int = 60,
        burst: int = 60,
        per_minute: int = 60,
        monotonic: Callable[[], float] = time.monotonic,
        shared: RefusalBudgets | None = None,
    ) -> None:
        if interval <= 0 or burst <= 0 or per_minute <= 0:
            raise ValueError("interval, burst and per_minute must be positive")
        self._write_one = write_one
        self._write_many = write_many
        self._now = now
        self.interval = interval
        self.burst = burst
        self.per_second = per_minute / 60.0
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], _Window] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._shared = shared

    # -- the rate limit -----------------------------------------------------------

    def limited(self, token_key: str) -> tuple[Principal, int] | None:
        """``(principal, retry_after)`` when the token's refusal budget is spent, else None.

        Only a token that was refused before has a bucket, so this costs a dict lookup
        for every other request, and nothing is stored for a token never authenticated.
        """
        with self._lock:
            bucket = self._buckets.get(token_key)
            if bucket is None:
                return None
            self._refill(bucket)
            if bucket.tokens >= 1.0:
                return None
            return bucket.principal, max(1, math.ceil((1.0 - bucket.tokens) / self.per_second))

    def _refill(self, bucket: _Bucket) -> None:
        now = self._monotonic()
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.per_second)
        bucket.at = now

    def _charge(self, token_key: str, principal: Principal) -> None:
        bucket = self._buckets.get(token_key)
        if bucket is None:
            bucket = self._buckets[token_key] = _Bucket(
                principal, float(self.burst), self._monotonic()
            )
        self._refill(bucket)
        bucket.tokens = max(0.0, bucket.tokens - 1.0)

    # -- recording ----------------------------------------------------------------

    def refused(
        self,
        principal: Principal,
        refusal: RefusedRequest,
        *,
        token_key: str | None,
        charge: bool = True,
    ) -> Callable[[], None] | None:
        """Record one refusal. Returns None when it was counted (no I/O), or the write of
        the row that opens its window, to be called from a worker thread (it blocks on
        the database). ``charge=False`` for a refusal that must not take from the token's
        budget (a rate-limit refusal). A row that cannot be written is counted instead
        (the next flush writes it) and logged: the refusal is answered either way.
        """
        now = self._now()
        key = (refusal.by, refusal.code)
        shared = token_key if charge and self._shared is not None else None
        with self._lock:
            if charge and token_key is not None:
                self._charge(token_key, principal)
            window = self._windows.get(key)
            opens = window is None
            if window is not None:
                self._count(window, refusal.request, now)
            else:
                self._windows[key] = _Window(role=refusal.role)
        if not opens and shared is None:
            return None

        def write() -> None:
            if shared is not None:
                self._charge_shared(shared, principal)
            if not opens:
                return
            try:
                self._write_one(refusal.event())
            except Exception:
                _log.exception("a refusal's audit row was not written; it is counted instead")
                with self._lock:
                    window = self._windows.setdefault(key, _Window(role=refusal.role))
                    self._count(window, refusal.request, now)

        return write

    def _charge_shared(self, token_key: str, principal: Principal) -> None:
        """Take the charge from the replicas' budget too; keep the lower of the two here."""
        assert self._shared is not None
        try:
            left = self._shared.charge(token_key, principal.name, principal.kind, principal.role)
        except Exception:  # this process's bucket is charged; the refusal is answered
            _log.exception("a refusal was not charged to the shared budget")
            return
        self._lower(token_key, principal, left)

    def _lower(self, token_key: str, principal: Principal, left: float) -> None:
        with self._lock:
            bucket = self._buckets.get(token_key)
            if bucket is None:
                self._buckets[token_key] = _Bucket(principal, left, self._monotonic())
                return
            self._refill(bucket)
            bucket.tokens = min(bucket.tokens, left)

    def adopt(self, token_key: str) -> None:
        """Copy the shared budget of ``token_key`` (every spent one when "", after the
        listener reconnected) into this process's buckets: another replica spent it.
        Called from the listener's thread (``wake.Listener``)."""
        if self._shared is None:
            return
        for budget in self._shared.spent(token_key or None):
            who = Principal(budget.name, _kind(budget.kind), _role(budget.role))
            self._lower(budget.token_key, who, self._shared.left(budget))

    @staticmethod
    def _count(window: _Window, request: str, now: int) -> None:
        if window.count == 0:
            window.first_at = now
        window.count += 1
        window.last_at = now
        if len(window.requests) < REQUESTS_KEPT:
            window.requests.add(request)

    def pending(self) -> int:
        """Refusals counted and not written yet."""
        with self._lock:
            return sum(w.count for w in self._windows.values())

    def flush(self) -> int:
        """Write every counted refusal (one row per caller and code, one transaction);
        close the windows that counted nothing; forget full buckets. Returns the rows
        written. On a failed write the counts are kept for the next flush and the error
        is raised."""
        with self._lock:
            events: list[RefusedCounted] = []
            taken: dict[tuple[str, str], _Window] = {}
            for key, window in list(self._windows.items()):
                if window.count == 0:
                    del self._windows[key]
                    continue
                by, code = key
                events.append(
                    RefusedCounted(
                        by=by,
                        role=window.role,
                        code=code,
                        count=window.count,
                        first_at=window.first_at,
                        last_at=window.last_at,
                        interval=self.interval,
                        requests=sorted(window.requests),
                    )
                )
                taken[key] = window
                self._windows[key] = _Window(role=window.role)
            for token_key, bucket in list(self._buckets.items()):
                self._refill(bucket)
                if bucket.tokens >= self.burst:
                    del self._buckets[token_key]
        if self._shared is not None:
            try:
                self._shared.forget_full()
            except Exception:  # kept for the next flush; a full budget refuses nobody
                _log.exception("forgetting the shared budgets earned back failed")
        if not events:
            return 0
        try:
            self._write_many(events)
        except BaseException:
            with self._lock:
                for key, old in taken.items():
                    window = self._windows.setdefault(key, _Window(role=old.role))
                    window.first_at = (
                        old.first_at if window.count == 0 else min(old.first_at, window.first_at)
                    )
                    window.count += old.count
                    window.last_at = max(window.last_at, old.last_at)
                    window.requests |= old.requests
            raise
        return len(events)


def _kind(kind: str) -> Literal["user", "service"]:
    if kind not in ("user", "service"):
        raise ValueError(f"unknown principal kind {kind!r}")
    return cast(Literal["user", "service"], kind)


def _role(role: str) -> Role:
    if role not in get_args(Role):
        raise ValueError(f"unknown role {role!r}")
    return cast(Role, role)
