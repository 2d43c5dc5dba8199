"""Stopping the checkpoint answers an executor's open feed long-poll instead of cutting it.

The server runs in a thread of this process on a socket bound first; the stop is asked
for as a signal would (``handle_exit``), and the long-poll is known to be waiting because
it is registered on the app's feed signal. No sleeps: each wait is a deadline-bounded poll
of a condition.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

from services.checkpoint.routes import FeedSignal
from tests.checkpoint.harness import long_poll, make_world, served

_DEADLINE = 20.0


def test_a_stop_answers_an_open_feed_long_poll_at_once(sqlite_url: str, tmp_path: Path) -> None:
    world = make_world(sqlite_url, tmp_path)
    world.app.state.feed_max_wait = 600  # the poll could otherwise end by itself in time
    feed: FeedSignal = world.app.state.feed_signal
    # A graceful timeout far longer than the test allows: only the early answer passes.
    with served(world.app, graceful=60) as (server, port, serving):
        polling, answer = long_poll(world, port, wait=600, timeout=_DEADLINE)

        asked = time.monotonic()
        server.handle_exit(signal.SIGTERM, None)
        polling.join(_DEADLINE)
        serving.join(_DEADLINE)
        assert not polling.is_alive() and not serving.is_alive()
        assert answer.get("status") == 200, answer
        assert answer["body"]["items"] == [] and answer["body"]["cursor"] == 0
        # Answered before the graceful timeout could have cut it (60 s; the deadline is 20 s).
        assert time.monotonic() - asked < _DEADLINE
        assert feed.closed


def test_a_closed_feed_signal_never_waits_again() -> None:
    feed = FeedSignal()

    async def scenario() -> float:
        waiter = asyncio.ensure_future(feed.wait(feed.version, 60))
        await asyncio.sleep(0)  # let the waiter register
        assert len(feed._waiters) == 1
        feed.close()
        await asyncio.wait_for(waiter, 5)
        started = time.monotonic()
        await asyncio.wait_for(feed.wait(feed.version, 60), 5)  # returns at once: closed
        return time.monotonic() - started

    # On a loop of its own thread: the browser tests keep a loop running in this one.
    took: list[float] = []
    runner = threading.Thread(target=lambda: took.append(asyncio.run(scenario())))
    runner.start()
    runner.join(_DEADLINE)
    assert took and took[0] < 5
    assert not feed._waiters
