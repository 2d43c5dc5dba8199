"""Sign-in throttling: growing delays per client address and per (address, name).

A guesser is slowed where they guess from; the person whose name they guess signs in
at once from anywhere else. Each failed sign-in raises two counts, the address's and the
(address, name) pair's; past a few free attempts each count sets a delay that doubles
with every further failure, up to :data:`CAP` (one hour). An attempt made before both
delays have passed is refused at once (``E_THROTTLED``, with ``Retry-After``): no
password check, no database write, no thread kept waiting, so a flood of attempts costs
the server nothing that other requests need. An address also has at most
:data:`IN_FLIGHT_PER_ADDRESS` sign-ins in progress at once.

Claim, then act (STYLE §6): :meth:`SignInThrottle.admit` counts an attempt as a failure
*before* its password is checked, under one lock, so parallel attempts cannot all pass
a check made before any of them failed; a right password then undoes its own count
(:meth:`SignInThrottle.succeeded`).

Pure and in memory: every call takes ``now``; nothing here reads a clock, does I/O or
logs. The state is this process's; a restart forgets it (SECURITY.md, Honest limits).
Names are keyed hashes (``auth.name_key``), never the names typed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ADDRESS_FREE",
    "CAP",
    "IN_FLIGHT_PER_ADDRESS",
    "PAIR_FREE",
    "Admission",
    "SignInThrottle",
    "Throttled",
    "delay_after",
]

#: Failures of one (address, name) pair before its delay starts (typos are free).
PAIR_FREE: Final = 3
#: Failures from one address, whatever the names, before its delay starts.
ADDRESS_FREE: Final = 10
#: The first delay, seconds; each further failure doubles it, up to CAP.
BASE: Final = 1
#: The longest delay, seconds.
CAP: Final = 3600
#: A count is forgotten this long after its last failure, seconds.
FORGET_AFTER: Final = 24 * 3600
#: Sign-ins in progress at once from one address; more are refused at once.
IN_FLIGHT_PER_ADDRESS: Final = 2
#: Counts kept at most (addresses and pairs together); the least recently used go first.
MAX_ENTRIES: Final = 100_000


def delay_after(failures: int, free: int) -> int:
    """Seconds to wait after ``failures`` failures of a count whose first ``free`` are free:
    0, then BASE, doubling with each failure, at most CAP."""
    if failures < free:
        return 0
    return min(CAP, BASE << min(failures - free, 31))


class Throttled(Exception):
    """Too soon after failures: try again in ``retry_after`` seconds (at least 1)."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"retry after {retry_after} s")
        self.retry_after = max(1, retry_after)


@dataclass(slots=True)
class _Count:
    failures: int = 0
    #: No attempt is admitted before this time.
    next_at: int = 0
    last_at: int = 0
    in_flight: int = 0


@dataclass(frozen=True, slots=True)
class Admission:
    """One admitted sign-in attempt, counted as a failure until :meth:`succeeded`."""

    address: str
    name_key: str
    #: The pair's failures with this attempt: the first PAIR_FREE count toward the
    #: account's last-resort lock (auth.py), later ones do not.
    pair_failures: int


class SignInThrottle:
    """The counts of one checkpoint process. Thread-safe."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._counts: OrderedDict[tuple[str, ...], _Count] = OrderedDict()
        self._max = max_entries

    def _count(self, key: tuple[str, ...], now: int) -> _Count:
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = _Count()
            while len(self._counts) > self._max:
                self._counts.popitem(last=False)
        else:
            self._counts.move_to_end(key)
            if count.in_flight == 0 and now - count.last_at >= FORGET_AFTER:
                count.failures, count.next_at = 0, 0
        return count

    def admit(self, address: str, name_key: str, now: int) -> Admission:
        """Admit one attempt and count it as a failure, or refuse it.

        Raises:
            Throttled: a delay of the address or of the pair has not passed, or the
                address has IN_FLIGHT_PER_ADDRESS attempts in progress.
        """
        with self._lock:
            by_address = self._count(("address", address), now)
            pair = self._count(("pair", address, name_key), now)
            wait = max(by_address.next_at, pair.next_at) - now
            if wait > 0:
                raise Throttled(wait)
            if by_address.in_flight >= IN_FLIGHT_PER_ADDRESS:
                raise Throttled(1)
            by_address.in_flight += 1
            for count, free in ((by_address, ADDRESS_FREE), (pair, PAIR_FREE)):
                count.failures += 1
                count.last_at = now
                count.next_at = now + delay_after(count.failures, free)
            return Admission(address, name_key, pair.failures)

    def done(self, admission: Admission) -> None:
        """The attempt is over (right or wrong): free its in-progress place."""
        with self._lock:
            count = self._counts.get(("address", admission.address))
            if count is not None and count.in_flight > 0:
                count.in_flight -= 1

    def succeeded(self, admission: Admission) -> None:
        """The attempt was right: the pair is forgotten and the address's failure undone.

        The address's delay is left as it is: a guesser who also holds an account of
        their own must not clear their address's count by signing in between guesses.
        """
        with self._lock:
            self._counts.pop(("pair", admission.address, admission.name_key), None)
            count = self._counts.get(("address", admission.address))
            if count is not None and count.failures > 0:
                count.failures -= 1

    def retry_after(self, address: str, name_key: str, now: int) -> int:
        """Seconds until an attempt for ``name_key`` from ``address`` is admitted (0: now)."""
        with self._lock:
            waits = [
                c.next_at - now
                for c in (
                    self._counts.get(("address", address)),
                    self._counts.get(("pair", address, name_key)),
                )
                if c is not None
            ]
        return max([0, *waits])
