"""Which address a sign-in is throttled under: the socket's peer, and X-Forwarded-For
only from a configured proxy (``AIRLOCK_CHECKPOINT_TRUSTED_PROXIES``). Trusted from
anyone, the header would let a guesser name a fresh address with every guess."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock.settings import CheckpointSettings
from services.checkpoint import throttle

from .harness import World, audit_events, make_world

WEBAPP = "10.20.0.1"


@pytest.fixture
def proxied(sqlite_url: str, tmp_path: Path) -> Iterator[World]:
    w = make_world(sqlite_url, tmp_path, trusted_proxies=(WEBAPP,))
    try:
        yield w
    finally:
        w.client.close()
        w.checkpoint.db.dispose()


def _guess(world: World, peer: str, forwarded: str | None = None) -> int:
    headers = {"X-Forwarded-For": forwarded} if forwarded is not None else {}
    response = world.client_from(peer).post(
        "/v1/sessions", json={"username": "alice", "password": "wrong guess"}, headers=headers
    )
    return int(response.status_code)


def test_a_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored(proxied: World) -> None:
    world = proxied
    statuses = [_guess(world, "10.30.0.1", f"192.0.2.{i}") for i in range(throttle.PAIR_FREE + 1)]
    assert statuses == [401] * throttle.PAIR_FREE + [429]  # one address, however named
    clients = {e["client"] for e in audit_events(world, "checkpoint.login.failed")}
    assert clients == {"10.30.0.1"}


def test_the_web_apps_forwarded_for_names_each_browser(proxied: World) -> None:
    """All sign-ins through the web app come from its one address: without the header
    one guesser there would slow every person who signs in through it."""
    world = proxied
    for _ in range(throttle.PAIR_FREE):
        assert _guess(world, WEBAPP, "198.51.100.7") == 401
    assert _guess(world, WEBAPP, "198.51.100.7") == 429  # the guesser is slowed
    alice = world.client_from(WEBAPP).post(
        "/v1/sessions",
        json={"username": "alice", "password": "correct horse battery staple"},
        headers={"X-Forwarded-For": "203.0.113.9"},
    )
    assert alice.status_code == 201  # alice, behind the same web app, is not
    failed = audit_events(world, "checkpoint.login.failed")
    assert {e["client"] for e in failed} == {"198.51.100.7"}
    # A proxy appends the peer it saw: the last address is the one it vouches for.
    assert _guess(world, WEBAPP, "6.6.6.6, 198.51.100.8") == 401
    assert audit_events(world, "checkpoint.login.failed")[-1]["client"] == "198.51.100.8"


def test_an_ipv6_client_is_throttled_by_its_64(proxied: World) -> None:
    """One host holds a whole /64: per address, it would have 2**64 fresh ones."""
    world = proxied
    statuses = [
        _guess(world, WEBAPP, f"2001:db8:1:2::{i:x}") for i in range(throttle.PAIR_FREE + 1)
    ]
    assert statuses[-1] == 429
    failed = audit_events(world, "checkpoint.login.failed")
    assert {e["client"] for e in failed} == {"2001:db8:1:2::/64"}


def test_trusted_proxies_setting_takes_addresses_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_TRUSTED_PROXIES", "127.0.0.1, ::1")
    assert CheckpointSettings().trusted_proxies == ("127.0.0.1", "::1")
    monkeypatch.setenv("AIRLOCK_CHECKPOINT_TRUSTED_PROXIES", "webapp.internal")
    with pytest.raises(ValueError, match="not IP addresses"):
        CheckpointSettings()
    monkeypatch.delenv("AIRLOCK_CHECKPOINT_TRUSTED_PROXIES")
    assert CheckpointSettings().trusted_proxies == ()
