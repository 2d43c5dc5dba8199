"""The daemon loop's pacing: how long it waits on its source, and when it recovers."""

from __future__ import annotations

import itertools
from collections.abc import Container, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from airlock.settings import ExecutorSettings
from services.executor import Executor, daemon
from services.executor.daemon import Shutdown, serve
from services.executor.sources import Delivery

from .conftest import Env


class _FakeClock:
    """A monotonic clock that moves only when the loop waits on the source."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _LongPollingSourceDouble:
    """A long-poll source that is always empty and waits, on the fake clock, as long as
    it is asked to; stops the loop after ``turns`` polls."""

    long_poll = True

    def __init__(self, clock: _FakeClock, shutdown: Shutdown, turns: int) -> None:
        self.clock, self.shutdown, self.turns = clock, shutdown, turns
        self.waits: list[float] = []

    def receive(self, *, wait_s: float) -> Sequence[Delivery]:
        self.waits.append(wait_s)
        self.clock.now += wait_s
        if len(self.waits) >= self.turns:
            self.shutdown.request()
        return ()

    def revoked(self) -> Container[str]:
        return frozenset()

    def ack(self, delivery: Delivery) -> None:
        raise AssertionError("nothing is delivered")


def test_a_poll_wait_longer_than_the_recovery_period_does_not_put_recovery_off(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: each long poll waited the whole poll wait whatever the time to
    the next recovery pass, so with a poll wait of 60 s and recovery every 10 s the
    daemon recovered (and beat its heartbeat) every 60 s. A poll now ends when recovery
    is due."""
    clock, shutdown = _FakeClock(), Shutdown()
    source = _LongPollingSourceDouble(clock, shutdown, turns=12)
    recovered_at: list[float] = []
    recover = daemon.recover_expired

    def counted(executor: Executor, **kw: Any) -> Any:
        recovered_at.append(clock.now)
        return recover(executor, **kw)

    monkeypatch.setattr(daemon, "recover_expired", counted)
    serve(
        env.executor,
        source,
        shutdown=shutdown,
        poll_wait_s=60.0,
        recover_every_s=10.0,
        monotonic=clock,
    )
    assert max(source.waits) <= 10.0
    assert recovered_at[0] == 0.0  # at start
    gaps = [b - a for a, b in itertools.pairwise(recovered_at)]
    assert gaps and all(gap <= 10.0 for gap in gaps), recovered_at


def test_a_poll_wait_shorter_than_the_recovery_period_is_waited_whole(env: Env) -> None:
    clock, shutdown = _FakeClock(), Shutdown()
    source = _LongPollingSourceDouble(clock, shutdown, turns=4)
    serve(
        env.executor,
        source,
        shutdown=shutdown,
        poll_wait_s=5.0,
        recover_every_s=30.0,
        monotonic=clock,
    )
    assert source.waits == [5.0] * 4


@pytest.mark.parametrize("wait", ["0", "601"])
def test_a_poll_wait_the_checkpoint_would_refuse_is_refused_at_start(
    wait: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The feed answers 422 to a wait over 600 s, which the executor retries forever as
    a feed that is unavailable; the setting is refused before anything starts instead."""
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_EXECUTOR_POLL_WAIT", wait)
    with pytest.raises(ValidationError, match="poll_wait"):
        ExecutorSettings()


def test_the_longest_poll_wait_the_checkpoint_takes_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv("AIRLOCK_EXECUTOR_POLL_WAIT", "600")
    assert ExecutorSettings().poll_wait == 600
