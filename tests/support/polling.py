"""Waiting on an observable condition in tests: bounded polling, never a blind sleep."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_for"]

_T = TypeVar("_T")


def wait_for(what: str, check: Callable[[], _T], timeout: float, *, every: float = 0.25) -> _T:
    """``check()``'s first truthy value, polled every ``every`` seconds; AssertionError
    naming ``what`` once ``timeout`` seconds have passed without one."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(every)
