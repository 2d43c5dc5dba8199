"""The delivery worker: a thread of the checkpoint process that sends the outbox.

Never in a request's path: an approval commits its event and returns; this thread finds
it on its next pass (every ``poll`` seconds, or at once when :meth:`Dispatcher.wake` is
called). Each channel has at most one send in flight, in a pool with a thread per
channel, so a receiver that hangs holds its own channel back for at most the channel's
timeout and never another's. A try that fails is retried after the configured delays
until the retry window ends; then the delivery is dead, kept for ``airlock notify
outbox`` to show and re-send.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from sqlalchemy.engine import Engine

from .channels import DeliveryError, Sender
from .config import NotifyConfig
from .outbox import Delivery, Outbox, OutboxStats

__all__ = ["Dispatcher", "NotifyMetrics"]

_log = logging.getLogger("airlock.checkpoint.notify")


class NotifyMetrics(Protocol):
    """Where the worker counts (``routes.Metrics`` in the app)."""

    def delivery(self, channel: str, result: str) -> None: ...

    def outbox(self, stats: OutboxStats) -> None: ...


class Dispatcher:
    """Sends due deliveries of one outbox through ``senders``, one pass at a time
    (:meth:`run_once`) or in a thread of its own (:meth:`start` … :meth:`stop`)."""

    def __init__(
        self,
        engine: Engine,
        config: NotifyConfig,
        senders: Mapping[str, Sender],
        *,
        now: Callable[[], int],
        metrics: NotifyMetrics | None = None,
        poll: float = 1.0,
    ) -> None:
        self.outbox = Outbox(engine, now)
        self.config = config
        self.senders = dict(senders)
        self.metrics = metrics
        self.poll = poll
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, len(self.senders)), thread_name_prefix="airlock-notify"
        )
        self._lock = threading.Lock()
        self._in_flight: dict[str, Future[None]] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self, *, wait: bool = False) -> int:
        """Claim what is due (a delivery per idle channel) and send it in the pool;
        with ``wait``, until those sends are done. Returns how many were claimed."""
        with self._lock:
            busy = [name for name, f in self._in_flight.items() if not f.done()]
        claimed: list[Future[None]] = []
        seen: set[str] = set(busy)
        for delivery in self.outbox.due(limit=4 * max(1, len(self.senders)) + len(busy), skip=busy):
            if delivery.channel in seen:
                continue
            sender = self.senders.get(delivery.channel)
            if sender is None:
                self.outbox.kill(delivery.id, "the channel is not configured any more")
                self._count(delivery.channel, "dead")
                continue
            if not self.outbox.claim(delivery, self.config.claim_for):
                continue  # another worker took it
            seen.add(delivery.channel)
            future = self._pool.submit(self._send, sender, delivery)
            with self._lock:
                self._in_flight[delivery.channel] = future
            claimed.append(future)
        if wait:
            for future in claimed:
                future.result()
        if self.metrics is not None:
            self.metrics.outbox(self.outbox.stats())
        return len(claimed)

    def _send(self, sender: Sender, delivery: Delivery) -> None:
        try:
            sender.send(json.loads(delivery.body))
        except DeliveryError as exc:
            error = str(exc)
        except Exception as exc:  # a sender's bug must not stop the worker
            _log.exception("notify: channel %s failed unexpectedly", delivery.channel)
            error = f"{type(exc).__name__}: unexpected"
        else:
            self.outbox.delivered(delivery.id)
            self._count(delivery.channel, "delivered")
            return
        dead = self.outbox.failed(delivery, error, self.config)
        self._count(delivery.channel, "failed")
        if dead:
            self._count(delivery.channel, "dead")
            _log.warning(
                "notify: %s to channel %s is dead after %d tries: %s",
                delivery.event_id,
                delivery.channel,
                delivery.attempts + 1,
                error,
            )

    def _count(self, channel: str, result: str) -> None:
        if self.metrics is not None:
            self.metrics.delivery(channel, result)

    def wake(self) -> None:
        """Make the thread's next pass now (after a commit that wrote an event)."""
        self._wake.set()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the dispatcher is running already")
        self._thread = threading.Thread(target=self._loop, name="airlock-notify", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # the database away for a moment: the next pass tries again
                _log.exception("notify: a pass over the outbox failed")
            self._wake.wait(self.poll)
            self._wake.clear()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop passing; sends under way finish or are left to their claim (sent again
        by the next start: at least once)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
