"""Loopback ports for the servers tests and benchmarks start in other processes or threads.

Such a server is told its port before it binds it, so the port is chosen, released, then
bound again later. Asking the kernel for port 0 made that window a race: the kernel hands
out the same ephemeral range (32768–60999 on Linux) to every outgoing connection, so a
client connecting to PostgreSQL or devcloud meanwhile, or the next ``bind(0)``, could take
the port first ("address already in use"; it failed a full run once). Ports here are
picked *below* the ephemeral range, where the kernel never assigns a port by itself, and
never twice in one process. Under pytest-xdist each worker draws from its own slice of that
range, so two workers never hand out the same port either.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
from pathlib import Path
from typing import Final

__all__ = ["free_port"]

#: The lowest port handed out.
_FLOOR: Final = 20000
_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_lock = threading.Lock()
_handed: set[int] = set()


def _candidates() -> range:
    low, high = 32768, 60999  # Linux's default ephemeral range
    with contextlib.suppress(OSError, ValueError, IndexError):
        low, high = (int(n) for n in _RANGE_FILE.read_text().split()[:2])
    if low - _FLOOR >= 2000:
        return _worker_slice(range(_FLOOR, low))
    if 65535 - high >= 500:
        return _worker_slice(range(high + 1, 65536))
    raise RuntimeError(f"the ephemeral port range {low}–{high} leaves no room for test servers")


def _worker_slice(ports: range) -> range:
    """This pytest-xdist worker's share of ``ports`` (all of it outside xdist): workers are
    separate processes, so ``_handed`` alone cannot keep them apart."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", …
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return ports
    # A worker that crashed is replaced by one with a new id (gw2 after gw0 and gw1 of
    # two): it takes the slice of the one it replaces, which no longer draws from it.
    total = max(1, int(count))
    index = int(worker[2:]) % total
    size = len(ports) // total
    return range(ports.start + index * size, ports.start + (index + 1) * size)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on now, outside the kernel's ephemeral range, and
    not handed out before by this process."""
    ports = _candidates()
    rng = random.Random()  # seeded from the OS: concurrent runs start at different ports
    with _lock:
        for _ in range(200):
            port = rng.choice(ports)
            if port in _handed or not _bindable(port):
                continue
            _handed.add(port)
            return port
    raise RuntimeError(f"no free loopback port found in {ports.start}–{ports.stop - 1}")
