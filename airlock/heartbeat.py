"""A heartbeat file: a daemon's loop touches it, a health check reads its age.

The executor's daemon and the agent's ``--loop`` each touch theirs on every turn, so a
container health check (``airlock executor health``, ``airlock agent health``) can tell
a live loop from a wedged or dead one. Only the file's modification time counts; it
holds nothing. Writing it must never stop the loop that writes it.
"""

from __future__ import annotations

import logging
from pathlib import Path

__all__ = ["Heartbeat", "heartbeat_age"]

_log = logging.getLogger("airlock.heartbeat")


class Heartbeat:
    """Touches ``path`` (mtime = now) on every :meth:`beat`; no path, no file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def beat(self) -> None:
        if self.path is not None:
            try:
                self.path.touch(exist_ok=True)
            except OSError as exc:  # a health file must never stop the daemon
                _log.warning("heartbeat %s not written: %s", self.path, exc)


def heartbeat_age(path: Path, now: float) -> float | None:
    """Seconds since the last beat, or None when there is none."""
    try:
        return now - path.stat().st_mtime
    except FileNotFoundError:
        return None
