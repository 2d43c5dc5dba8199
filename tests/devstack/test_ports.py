"""The ports test servers are told to bind: never the kernel's to give away meanwhile."""

from __future__ import annotations

import socket

import pytest

from devstack import ports


def test_ports_are_below_the_ephemeral_range_and_never_handed_out_twice() -> None:
    low, high = (int(n) for n in ports._RANGE_FILE.read_text().split()[:2])
    handed = [ports.free_port() for _ in range(50)]
    assert len(set(handed)) == len(handed)
    assert all(not low <= p <= high for p in handed)
    # Each can be bound, as the server that is told it will.
    for port in handed[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))


def test_a_port_something_listens_on_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", ports.free_port()))
        busy.listen()
        taken = busy.getsockname()[1]
        monkeypatch.setattr(ports, "_handed", set())  # only whether it is bound counts
        monkeypatch.setattr(ports, "_candidates", lambda: range(taken, taken + 2))
        assert ports.free_port() == taken + 1


def test_xdist_workers_draw_from_disjoint_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two xdist workers are two processes with their own ``_handed``: only disjoint
    slices keep one from handing out a port the other just did."""
    full = range(20000, 32768)
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        slices.append(set(ports._worker_slice(full)))
    assert all(s and s <= set(full) for s in slices)
    assert not (slices[0] & slices[1] or slices[0] & slices[2] or slices[1] & slices[2])
    # gw3 replaces a crashed worker of three: a slice of the three, not an error.
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert set(ports._worker_slice(full)) in slices
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert ports._worker_slice(full) == full
