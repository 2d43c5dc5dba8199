"""A page of deliveries executed on several threads, in feed order for each resource.

The daemon executes a page's approvals side by side (``AIRLOCK_EXECUTOR_PARALLEL``), so
that one execution's waits (its commits, the live re-read, the cloud call) overlap
another's. Nothing here decides anything: every delivery still goes through
:func:`~services.executor.recover.execute_delivery`, whose ledger INSERT decides single
use, and the feed's cursor never passes a delivery that has not committed
(:meth:`~services.executor.feed.CheckpointFeedSource.ack_in`).

It must never run two deliveries that name the same resource at once, nor out of their
feed order: an approval to stop an instance and one to delete it, approved in that order,
are re-read and written in that order, as one thread would. The resource is read from the
bundle's action bytes without verifying anything; that is only an ordering hint. For a
bundle that verifies, those bytes are the approved action's (their hash is signed); one
that does not is refused whatever its place, and a bundle that cannot be read at all is
put in one queue with every other such bundle.
"""

from __future__ import annotations

import binascii
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from .sources import Delivery

__all__ = ["MAX_PARALLEL", "Parallel", "resource_key"]

#: The most deliveries executed at once (``AIRLOCK_EXECUTOR_PARALLEL``'s bound): each
#: holds a ledger connection (SQLAlchemy's pool: 5, and 10 more) and an SDK connection
#: (boto3's pool: 10) while it runs, beside the loop's and the outbox's.
MAX_PARALLEL: Final = 8
#: The key of every bundle whose resource cannot be read: they run one after another.
_UNREADABLE: Final = ""


def resource_key(raw: bytes) -> str:
    """The resource ``raw``'s action names (region, type, id), read without verifying
    anything; ``""`` for a bundle that cannot be read so far. Never raises."""
    try:
        bundle = json.loads(raw)
        action = json.loads(binascii.a2b_base64(bundle["action"]))
        resource = action["resource"]
        return json.dumps([action["region"], resource["type"], resource["id"]])
    except (ValueError, TypeError, KeyError, binascii.Error, RecursionError):
        return _UNREADABLE


class Parallel:
    """Runs pages of deliveries on up to ``workers`` threads (see the module docstring).

    Raises ValueError for ``workers`` outside 1..:data:`MAX_PARALLEL`.
    """

    def __init__(self, workers: int) -> None:
        if not 1 <= workers <= MAX_PARALLEL:
            raise ValueError(f"workers must be between 1 and {MAX_PARALLEL}")
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="airlock-execute")

    def run(self, deliveries: Sequence[Delivery], one: Callable[[Delivery], bool]) -> int:
        """Call ``one`` on each delivery: those of one resource in their order, one after
        another, and each resource's run beside the others'. A run stops at a delivery
        for which ``one`` returns False or raises; the rest of that run is not called.
        Returns how many calls returned True once every run has ended, or raises the
        first exception a call raised, after every run has ended.
        """
        runs: dict[str, list[Delivery]] = {}
        for delivery in deliveries:
            runs.setdefault(resource_key(delivery.raw), []).append(delivery)
        done = 0
        lock = threading.Lock()

        def run(queue: list[Delivery]) -> None:
            nonlocal done
            for delivery in queue:
                if not one(delivery):
                    return
                with lock:
                    done += 1

        if len(runs) == 1:  # one resource: nothing to run beside it
            run(next(iter(runs.values())))
            return done
        futures = [self._pool.submit(run, queue) for queue in runs.values()]
        first: BaseException | None = None
        for future in futures:
            exc = future.exception()  # waits: every run ends before anything is raised
            if exc is not None and first is None:
                first = exc
        if first is not None:
            raise first
        return done

    def close(self) -> None:
        """Wait for the runs in flight, then stop the threads."""
        self._pool.shutdown(wait=True)
