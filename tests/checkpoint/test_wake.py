"""The replicas' wake-up channel (services/checkpoint/wake.py): a notification is sent
only when its transaction commits, and a listener whose connection is cut reconnects and
wakes everyone once, so a notification missed meanwhile costs a re-read, never an
approval."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from airlock.store import make_engine
from services.checkpoint.wake import APPLICATION_NAME, FEED, LIMITS, Listener, notify
from tests.support.polling import wait_for


class _Heard:
    """What a listener's callbacks were called with, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []

    def on(self, channel: str) -> object:
        def record(payload: str) -> None:
            with self._lock:
                self.calls.append((channel, payload))

        return record

    def payloads(self, channel: str) -> list[str]:
        with self._lock:
            return [p for c, p in self.calls if c == channel]


@pytest.fixture
def engine(pg_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(pg_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def heard(engine: sa.Engine) -> Iterator[tuple[Listener, _Heard]]:
    got = _Heard()
    listener = Listener(engine.url, {FEED: got.on(FEED), LIMITS: got.on(LIMITS)})  # type: ignore[dict-item]
    listener.start()
    try:
        assert listener.listening.wait(10.0)
        yield listener, got
    finally:
        listener.stop()


def _send(engine: sa.Engine, payload: str, *, commit: bool, channel: str = FEED) -> None:
    with engine.connect() as conn:
        notify(conn, channel, payload)
        if commit:
            conn.commit()
        else:
            conn.rollback()


@pytest.mark.postgres
def test_a_rolled_back_change_wakes_nobody(
    engine: sa.Engine, heard: tuple[Listener, _Heard]
) -> None:
    _, got = heard
    _send(engine, "rolled-back", commit=False)
    _send(engine, "committed", commit=True)
    _send(engine, "spent", commit=True, channel=LIMITS)
    wait_for("the committed notifications", lambda: got.payloads(LIMITS) == ["", "spent"], 10.0)
    # Sent in commit order: the rolled-back one, had it been sent, would have come first.
    assert got.payloads(FEED) == ["", "committed"]


@pytest.mark.postgres
def test_a_cut_listener_reconnects_and_wakes_everyone(
    engine: sa.Engine, heard: tuple[Listener, _Heard], pg_url: str
) -> None:
    listener, got = heard
    admin = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        cut = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (APPLICATION_NAME,),
        ).fetchall()
    assert cut == [(True,)]
    # The wake after the reconnect: every waiter re-reads whatever it may have missed.
    wait_for("the wake after a reconnect", lambda: got.payloads(FEED) == ["", ""], 20.0)
    assert listener.connections == 2
    _send(engine, "after", commit=True)
    wait_for("a change after the reconnect", lambda: "after" in got.payloads(FEED), 10.0)


def test_on_sqlite_nothing_is_sent(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'one.db'}")
    try:
        with engine.begin() as conn:
            notify(conn)  # one process by design: the committing thread wakes its own
    finally:
        engine.dispose()


def test_an_unknown_channel_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown"):
        Listener(make_url("postgresql://x@127.0.0.1/db"), {"other": lambda _p: None})
