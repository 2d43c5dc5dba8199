"""The record of sign-ins refused before any account was involved, one row per interval.

An unknown name and a throttled attempt (``throttle.py``) are refused without touching
an account, and anyone can send them: one audit row each would let anyone grow the
chain at will. :class:`RefusedSignIns` adds them up instead and hands back one
``checkpoint.sign_in.refused`` event per :data:`INTERVAL`, which the caller appends to
the audit chain: how many of each, from which client addresses and for which keyed
name hashes (the :data:`TOP` most frequent of each, and how many others), so that an
admin sees a campaign (``airlock users sign-ins``). A name is only ever its keyed hash
(``auth.name_key``): a password typed into the name field never reaches the chain.

Pure and in memory: every call takes ``now``; the caller writes the event.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Final, Literal

from airlock.events import CheckpointEvent

__all__ = ["EVENT_TYPE", "INTERVAL", "TOP", "RefusedSignIns"]

EVENT_TYPE: Final = CheckpointEvent.SIGN_IN_REFUSED
#: Seconds one event covers at most.
INTERVAL: Final = 60
#: Addresses and names named in an event; the rest are counted.
TOP: Final = 10
#: Distinct addresses or names tallied in one interval; past it they count as "others".
_MAX_KEYS: Final = 10_000

Kind = Literal["unknown_name", "throttled"]


class RefusedSignIns:
    """Tallies of the current interval. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset(0)

    def _reset(self, now: int) -> None:
        self._from = now
        self._to = now
        self._kinds: Counter[str] = Counter()
        self._clients: Counter[str] = Counter()
        self._names: Counter[str] = Counter()
        self._other_clients = 0
        self._other_names = 0

    def add(self, kind: Kind, address: str, name_key: str, now: int) -> dict[str, Any] | None:
        """Count one refused sign-in; return the event of the interval it closed, if any."""
        with self._lock:
            closed = self._close_if_due(now)
            if not self._kinds:
                self._from = now
            self._to = now
            self._kinds[kind] += 1
            if address in self._clients or len(self._clients) < _MAX_KEYS:
                self._clients[address] += 1
            else:
                self._other_clients += 1
            if name_key in self._names or len(self._names) < _MAX_KEYS:
                self._names[name_key] += 1
            else:
                self._other_names += 1
        return closed

    def drain(self, now: int, *, force: bool = False) -> dict[str, Any] | None:
        """The event of an interval that is over (or, with ``force``, of the current one)."""
        with self._lock:
            if force and self._kinds:
                return self._event(now)
            return self._close_if_due(now)

    def _close_if_due(self, now: int) -> dict[str, Any] | None:
        if not self._kinds or now - self._from < INTERVAL:
            return None
        return self._event(now)

    def _event(self, now: int) -> dict[str, Any]:
        clients = self._clients.most_common(TOP)
        names = self._names.most_common(TOP)
        event: dict[str, Any] = {
            "type": EVENT_TYPE,
            "from": self._from,
            "to": self._to,
            "unknown_name": self._kinds["unknown_name"],
            "throttled": self._kinds["throttled"],
            "clients": [{"address": a, "count": n} for a, n in clients],
            "other_clients": len(self._clients) - len(clients) + self._other_clients,
            "names": [{"name_hmac": k, "count": n} for k, n in names],
            "other_names": len(self._names) - len(names) + self._other_names,
        }
        self._reset(now)
        return event
