"""The record of sign-ins refused before any account was involved, one row per interval.

An unknown name and a throttled attempt (``throttle.py``) are refused without touching
an account, and anyone can send them: one audit row each would let anyone grow the chain
at will. :class:`RefusedSignIns` adds them up instead and hands back the fields of one
``checkpoint.sign_in.refused`` event per :data:`INTERVAL`
(:class:`airlock.events.SignInRefused`), which the caller appends to the audit chain:
how many of each, from which client addresses and for which keyed name hashes (the
:data:`TOP` most frequent of each, and how many others), so that an admin sees a
campaign (``airlock users sign-ins``). A name is only ever its keyed hash
(``auth.name_key``): a password typed into the name field never reaches the chain.
:class:`SignInTally` reads those events back, with the wrong passwords and the accounts
locked, into the :class:`SignInReport` that command prints.

Pure and in memory: every call takes ``now``; the caller writes the event and reads the
chain.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from airlock.events import CheckpointEvent, SignInRefused

__all__ = [
    "EVENT_TYPE",
    "INTERVAL",
    "TOP",
    "ClientSignIns",
    "RefusedSignIns",
    "SignInReport",
    "SignInTally",
    "SignInTotals",
]

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

    def add(self, kind: Kind, address: str, name_key: str, now: int) -> SignInRefused | None:
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

    def drain(self, now: int, *, force: bool = False) -> SignInRefused | None:
        """The event of an interval that is over (or, with ``force``, of the current one)."""
        with self._lock:
            if force and self._kinds:
                return self._event(now)
            return self._close_if_due(now)

    def _close_if_due(self, now: int) -> SignInRefused | None:
        if not self._kinds or now - self._from < INTERVAL:
            return None
        return self._event(now)

    def _event(self, now: int) -> SignInRefused:
        """The fields of the interval's event (the caller adds its ``type``)."""
        clients = self._clients.most_common(TOP)
        names = self._names.most_common(TOP)
        event: SignInRefused = {
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


@dataclass(frozen=True, slots=True)
class SignInTotals:
    """Refused sign-ins of a report, by cause."""

    wrong_password: int
    unknown_name: int
    throttled: int


@dataclass(frozen=True, slots=True)
class ClientSignIns:
    """One client address's refused sign-ins in a report."""

    wrong_password: int
    #: Wrong passwords by the user they were for (an existing account).
    users: Mapping[str, int]
    #: Its count in the tallies of ``checkpoint.sign_in.refused`` (their top addresses).
    unknown_name_or_throttled: int


@dataclass(frozen=True, slots=True)
class SignInReport:
    """Refused sign-ins recorded since ``since`` (Unix seconds): what ``airlock users
    sign-ins`` prints, and with ``--json`` the fields as they are named here."""

    since: int
    totals: SignInTotals
    #: By client address, in the order the chain first names each.
    clients: Mapping[str, ClientSignIns]
    #: Distinct keyed name hashes among the tallies' top names.
    distinct_unknown_names: int
    #: The accounts locked, oldest first (one entry each time).
    locked: tuple[str, ...]


class _Client:
    def __init__(self) -> None:
        self.wrong_password = 0
        self.users: Counter[str] = Counter()
        self.unknown_name_or_throttled = 0


class SignInTally:
    """Adds up the chain's sign-in events, oldest first, into a :class:`SignInReport`."""

    def __init__(self, since: int) -> None:
        self._since = since
        self._clients: dict[str, _Client] = {}
        self._locked: list[str] = []
        self._totals: Counter[str] = Counter()
        self._names: set[str] = set()

    def _client(self, address: str) -> _Client:
        return self._clients.setdefault(address, _Client())

    def wrong_password(self, user: str, address: str) -> None:
        """A ``checkpoint.login.failed`` event: a wrong password for ``user``."""
        entry = self._client(address)
        entry.wrong_password += 1
        entry.users[user] += 1
        self._totals["wrong_password"] += 1

    def locked(self, user: str) -> None:
        """A ``checkpoint.user.locked`` event."""
        self._locked.append(user)

    def refused(self, event: SignInRefused) -> None:
        """A ``checkpoint.sign_in.refused`` event (an interval's tally)."""
        self._totals["unknown_name"] += event["unknown_name"]
        self._totals["throttled"] += event["throttled"]
        for c in event["clients"]:
            self._client(c["address"]).unknown_name_or_throttled += c["count"]
        self._names.update(n["name_hmac"] for n in event["names"])

    def report(self) -> SignInReport:
        return SignInReport(
            since=self._since,
            totals=SignInTotals(
                wrong_password=self._totals["wrong_password"],
                unknown_name=self._totals["unknown_name"],
                throttled=self._totals["throttled"],
            ),
            clients={
                address: ClientSignIns(c.wrong_password, dict(c.users), c.unknown_name_or_throttled)
                for address, c in self._clients.items()
            },
            distinct_unknown_names=len(self._names),
            locked=tuple(self._locked),
        )
