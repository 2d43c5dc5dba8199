"""Named crash points on the gate's call path, for crash-recovery tests only.

The points, in the order a call reaches them::

    after_consume     the ledger row is committed ``claimed``; nothing was called
    after_executing   ``executing`` is committed; the function has not been called
    after_call        the function returned; the outcome is not committed

Inert unless ``AIRLOCK_GATE_FAILPOINTS=<point>[,<point>...]`` is set together with
``AIRLOCK_ENV=dev``; set without it, the gate refuses to start, so a crash switch is never
armed in production by a stray variable. An armed process sends itself ``SIGKILL`` the
first time it reaches a listed point: no finally block, no atexit, a real crash.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import Final

from .errors import ConfigError

__all__ = ["FAILPOINTS", "FAILPOINTS_ENV", "Failpoints"]

FAILPOINTS: Final = ("after_consume", "after_executing", "after_call")
FAILPOINTS_ENV: Final = "AIRLOCK_GATE_FAILPOINTS"


class Failpoints:
    """A set of armed points. Empty means inert."""

    __slots__ = ("_armed",)

    def __init__(self, armed: frozenset[str] = frozenset()) -> None:
        unknown = armed - set(FAILPOINTS)
        if unknown:
            raise ConfigError(f"E_CONFIG: unknown gate failpoints {sorted(unknown)}")
        self._armed = armed

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Failpoints:
        """Read ``AIRLOCK_GATE_FAILPOINTS``; refuse it unless ``AIRLOCK_ENV=dev``."""
        spec = environ.get(FAILPOINTS_ENV, "").strip()
        if not spec:
            return cls()
        if environ.get("AIRLOCK_ENV") != "dev":
            raise ConfigError(f"E_CONFIG: {FAILPOINTS_ENV} is set but AIRLOCK_ENV is not dev")
        return cls(frozenset(p.strip() for p in spec.split(",") if p.strip()))

    def hit(self, point: str) -> None:
        if point not in FAILPOINTS:
            raise ValueError(f"unknown failpoint {point!r}")
        if point in self._armed:
            os.kill(os.getpid(), signal.SIGKILL)
