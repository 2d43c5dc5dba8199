"""Named crash points on the execute path, for crash-recovery tests only.

The points, in the order the execute path reaches them::

    before_consume           live state is re-read and the precondition holds; nothing
                             is committed (the feed delivers the bundle again)
    after_executing_commit   the consume into ``executing`` is committed; the cloud call
                             has not been made
    after_cloud_call         the cloud call returned; the outcome is not committed
    after_outcome_commit     the outcome, audit event and receipt are committed

and two on the feed side, where at-least-once delivery is decided::

    before_cursor_commit     a feed item's record (ledger/refusals) and the cursor past it
                             are written in one transaction, not committed
    after_outcome_post       the checkpoint accepted a receipt; the delivery is not recorded

They are inert unless enabled. A test process enables them with
``AIRLOCK_EXECUTOR_FAILPOINTS=<point>[,<point>...]``; the process then sends itself
``SIGKILL`` the first time it reaches a listed point. The variable is honoured only
together with ``AIRLOCK_ENV=dev``: set in any other environment it is a configuration
error and the executor refuses to start, so a crash switch can never be armed in
production by a stray variable. In-process tests pass a hook instead (raising
:class:`~services.executor.errors.SimulatedCrash`).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from typing import Final

from .errors import ConfigError

__all__ = ["FAILPOINTS", "FAILPOINTS_ENV", "FEED_FAILPOINTS", "Failpoints"]

FAILPOINTS: Final = (
    "before_consume",
    "after_executing_commit",
    "after_cloud_call",
    "after_outcome_commit",
)
#: The feed side's points (tests/executor/test_feed.py crashes at each).
FEED_FAILPOINTS: Final = ("before_cursor_commit", "after_outcome_post")
FAILPOINTS_ENV: Final = "AIRLOCK_EXECUTOR_FAILPOINTS"
_KNOWN: Final = frozenset((*FAILPOINTS, *FEED_FAILPOINTS))


def _sigkill_self(point: str) -> None:
    del point
    # SIGKILL, not sys.exit: no finally blocks, no atexit, no flush — a real crash.
    os.kill(os.getpid(), signal.SIGKILL)


class Failpoints:
    """A set of armed points and what to do on reaching one. Empty means inert."""

    __slots__ = ("_action", "_armed")

    def __init__(
        self, armed: frozenset[str] = frozenset(), action: Callable[[str], None] = _sigkill_self
    ) -> None:
        unknown = armed - _KNOWN
        if unknown:
            raise ConfigError(
                f"unknown failpoints {sorted(unknown)}; known: {FAILPOINTS + FEED_FAILPOINTS}"
            )
        self._armed = armed
        self._action = action

    @classmethod
    def inert(cls) -> Failpoints:
        return cls()

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Failpoints:
        """Read ``AIRLOCK_EXECUTOR_FAILPOINTS``; refuse it unless ``AIRLOCK_ENV=dev``."""
        spec = environ.get(FAILPOINTS_ENV, "").strip()
        if not spec:
            return cls.inert()
        if environ.get("AIRLOCK_ENV") != "dev":
            raise ConfigError(
                f"{FAILPOINTS_ENV} is set but AIRLOCK_ENV is not 'dev': refusing to start "
                "with crash failpoints armed"
            )
        return cls(frozenset(p.strip() for p in spec.split(",") if p.strip()))

    @property
    def armed(self) -> frozenset[str]:
        return self._armed

    def hit(self, point: str) -> None:
        if point not in _KNOWN:
            raise ValueError(f"unknown failpoint {point!r}")
        if point in self._armed:
            self._action(point)
