"""The delivery worker: a thread of the checkpoint process that sends the outbox.

Never in a request's path: an approval commits its event and returns; this thread finds
it on its next pass (every ``poll`` seconds, or at once when :meth:`Dispatcher.wake` is
called, less a short gathering wait). A pass claims a batch per channel in one
transaction and settles each batch in one, so a burst of approvals costs the database a
few writes. Each channel has at most one batch in flight, in a pool with a thread per
channel, so a receiver that hangs holds its own channel back, never another's. A try
that fails is retried after the configured delays until the retry window ends; then the
delivery is dead, kept for ``airlock notify outbox`` to show and re-send.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from sqlalchemy.engine import Engine

from .channels import Sender
from .config import NotifyConfig
from .outbox import Delivery, Outbox, OutboxStats
from .people import person_senders

__all__ = ["Dispatcher", "NotifyMetrics"]

_log = logging.getLogger("airlock.checkpoint.notify")
#: Threads for deliveries to people (``person:<name>``), besides one per channel.
_PEOPLE_LANES = 4


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
        gather: float = 1.0,
        batch: int = 10,
    ) -> None:
        self.outbox = Outbox(engine, now)
        self.config = config
        self.senders = dict(senders)
        self.metrics = metrics
        self.poll = poll
        self.gather = gather
        self.batch = batch
        self._people = person_senders(engine, config, self.senders)
        # People's own deliveries share a few threads of their own.
        self._lanes = len(self.senders) + (_PEOPLE_LANES if config.routing.people.enabled else 0)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, self._lanes), thread_name_prefix="airlock-notify"
        )
        self._lock = threading.Lock()
        self._in_flight: dict[str, Future[None]] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self, *, wait: bool = False) -> int:
        """Claim what is due (up to ``batch`` deliveries per idle channel, in one
        transaction) and send each channel's in the pool, one SMTP session or kept-alive
        connection for them all; with ``wait``, until those sends are settled. Returns
        how many were claimed."""
        with self._lock:
            busy = [name for name, f in self._in_flight.items() if not f.done()]
        groups: dict[str, list[Delivery]] = {}
        limit = self.batch * max(1, self._lanes - len(busy))
        for delivery in self.outbox.due(limit=limit, skip=busy):
            if self._sender(delivery.channel) is None:
                self.outbox.kill(delivery.id, "the channel is not configured any more")
                self._count(delivery.channel, "dead")
                continue
            group = groups.setdefault(delivery.channel, [])
            if len(group) < self.batch:
                group.append(delivery)
        if not groups:
            self._gauges()
            return 0
        # Held long enough for every send of the largest batch to time out in turn.
        hold = self.config.claim_for * max(len(g) for g in groups.values())
        claimed: dict[str, list[Delivery]] = {}
        for delivery in self.outbox.claim([d for g in groups.values() for d in g], hold):
            claimed.setdefault(delivery.channel, []).append(delivery)
        futures = []
        for channel, deliveries in claimed.items():
            sender = self._sender(channel)
            assert sender is not None  # checked when it was due
            future = self._pool.submit(self._send, sender, deliveries)
            with self._lock:
                self._in_flight[channel] = future
            futures.append(future)
        if wait:
            for future in futures:
                future.result()
        self._gauges()
        return sum(len(d) for d in claimed.values())

    def _send(self, sender: Sender, deliveries: list[Delivery]) -> None:
        try:
            results = sender.send_all([json.loads(d.body) for d in deliveries])
        except Exception as exc:  # a sender's bug must not stop the worker
            _log.exception("notify: channel %s failed unexpectedly", sender.name)
            results = [f"{type(exc).__name__}: unexpected"] * len(deliveries)
        settled = list(zip(deliveries, results, strict=True))
        for delivery in self.outbox.settle(settled, self.config):
            self._count(delivery.channel, "dead")
            _log.warning(
                "notify: %s to channel %s is dead after %d tries",
                delivery.event_id,
                delivery.channel,
                delivery.attempts + 1,
            )
        for delivery, error in settled:
            self._count(delivery.channel, "delivered" if error is None else "failed")

    def _sender(self, channel: str) -> Sender | None:
        """The channel's sender, or a person's (``person:<name>``); None: not configured."""
        return self.senders.get(channel) or self._people(channel)

    def _gauges(self) -> None:
        if self.metrics is not None:
            self.metrics.outbox(self.outbox.stats())

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
            if self._wake.wait(self.poll):
                # Woken by a commit: let the events of the next moments join this pass,
                # so a burst of approvals costs the database a few writes, not many.
                self._stop.wait(self.gather)
            self._wake.clear()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop passing; sends under way finish or are left to their claim (sent again
        by the next start: at least once)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
