"""A deadline on a whole HTTP exchange with the checkpoint, status line and headers included.

httpx's timeouts bound one socket operation each: a checkpoint, or a proxy in front of it,
that sends the status line and the headers a byte per (read timeout − ε) holds the
request for as long as it likes, and a deadline checked between chunks of the body starts
too late to help. This module bounds the exchange where the bytes are read. It is shared
by every client of the checkpoint (the executor's feed and outbox, the web app, the
agent, the CLI's commands for people), so it imports no service, no web app and no
storage: only httpx and httpcore.

:class:`DeadlineBackend` wraps httpcore's sync network backend. While a :func:`within`
block is open (a context variable: each thread has its own), every connect, TLS
handshake, read and write on its streams is given at most what is left of the block's
deadline, and once it has passed fails at once as httpcore's own timeout, which httpx
raises as ``httpx.ConnectTimeout``, ``ReadTimeout`` or ``WriteTimeout``. Outside such a
block nothing changes. A blocked read wakes by its own socket timeout, in its own thread:
nothing here closes a socket from elsewhere.

:func:`deadline_transport` is httpx's ``HTTPTransport`` over such a backend (for a client
that trusts nothing from the environment); :func:`with_deadlines` puts such a backend
under the pools of a client httpx has built, its proxies from the environment included;
:func:`deadline_passed` tells a timeout of the deadline from one of a single read.

This module must never weaken TLS: the SSL context is made by httpx from what the caller
passed, handed to the pool unchanged, and the handshake is httpcore's.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, Literal

import httpcore
import httpx

__all__ = ["DeadlineBackend", "deadline_passed", "deadline_transport", "with_deadlines", "within"]

#: The monotonic time by which the exchange under way in this context must be over.
_deadline: ContextVar[float | None] = ContextVar("airlock_checkpoint_deadline", default=None)

#: The largest piece one write hands to the stream. httpcore's sync stream sends a buffer
#: in a loop that gives each partial send the whole timeout again; pieces this small fit
#: a socket's send buffer, so the deadline is looked at again at least every few KiB.
_WRITE_PIECE: Final = 4096

#: httpx's default pool limits, said explicitly: the pool below is built by hand.
_LIMITS: Final = httpx.Limits(
    max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0
)


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Every exchange that goes through a :class:`DeadlineBackend` in this block must be
    over ``seconds`` from now (a nested block cannot extend an outer one)."""
    if not seconds >= 0:  # NaN too
        raise ValueError(f"a deadline needs seconds >= 0, not {seconds!r}")
    until = time.monotonic() + seconds
    outer = _deadline.get()
    token = _deadline.set(until if outer is None else min(outer, until))
    try:
        yield
    finally:
        _deadline.reset(token)


def deadline_passed() -> bool:
    """Is this context inside a :func:`within` block whose deadline has passed?"""
    until = _deadline.get()
    return until is not None and time.monotonic() >= until


def _left(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
    """The timeout for one socket operation: ``timeout`` cut to what is left of the
    deadline, if there is one; ``expired`` raised once nothing is left."""
    until = _deadline.get()
    if until is None:
        return timeout
    left = until - time.monotonic()
    if left <= 0:
        raise expired("the deadline for the whole exchange with the checkpoint passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), _WRITE_PIECE):
            piece = buffer[start : start + _WRITE_PIECE]
            self._stream.write(piece, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # The handshake is one operation under one timeout (CPython's do_handshake keeps
        # a deadline across its own reads and writes), so the cut timeout bounds it whole.
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, its streams bounded by the :func:`within` deadline."""

    def __init__(self, backend: httpcore.NetworkBackend | None = None) -> None:
        self._backend = backend if backend is not None else httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        # The name lookup inside is the system resolver's, bounded by its own timeouts.
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._backend.connect_tcp(host, port, left, local_address, socket_options)
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def deadline_transport(verify: ssl.SSLContext | Literal[True]) -> httpx.HTTPTransport:
    """httpx's transport (certificates and host names verified against ``verify``: True
    is certifi's bundle), its connections made through a :class:`DeadlineBackend`.

    ``trust_env=False`` as for the client: neither ``SSL_CERT_FILE`` nor a proxy from the
    environment.
    """
    if verify is not True and not isinstance(verify, ssl.SSLContext):
        raise TypeError("verify must be True or an ssl.SSLContext; verification stays on")
    context = httpx.create_ssl_context(verify=verify, trust_env=False)
    transport = httpx.HTTPTransport(
        verify=context, trust_env=False, limits=_LIMITS, http1=True, http2=False
    )
    # httpx takes no network backend, so the pool it built is replaced by one with ours,
    # with the same SSL context and limits and what HTTPTransport passes by default
    # (HTTP/1.1 only, no retries, no proxy). Checked, not assumed: another httpx might
    # build something else there, and a pool we did not mean would go unnoticed.
    if type(transport._pool) is not httpcore.ConnectionPool:
        raise RuntimeError(f"httpx's transport holds a {type(transport._pool)!r}, not a pool")
    transport._pool = httpcore.ConnectionPool(
        ssl_context=context,
        max_connections=_LIMITS.max_connections,
        max_keepalive_connections=_LIMITS.max_keepalive_connections,
        keepalive_expiry=_LIMITS.keepalive_expiry,
        http1=True,
        http2=False,
        retries=0,
        network_backend=DeadlineBackend(),
    )
    return transport


def with_deadlines(client: httpx.Client) -> httpx.Client:
    """``client`` itself, every connection it makes (to the server, or to a proxy httpx
    mounted from ``HTTPS_PROXY`` and friends) now made through a :class:`DeadlineBackend`.

    For a client that keeps httpx's ``trust_env``: a transport of our own, as
    :func:`deadline_transport` makes, would drop the proxies httpx mounts from the
    environment. So the pools httpx built are kept, each with its SSL context, proxy and
    limits untouched, and only the network backend under them is wrapped. A client built
    around another transport (a test's), or one that has connected already, is refused:
    checked, not assumed, like the pool :func:`deadline_transport` replaces.
    """
    pools: list[httpcore.ConnectionPool] = []
    for transport in (client._transport, *client._mounts.values()):
        if transport is None:  # a NO_PROXY pattern: the client's own transport serves it
            continue
        if type(transport) is not httpx.HTTPTransport:
            raise RuntimeError(f"the client holds a {type(transport)!r}, not httpx's transport")
        pool = transport._pool
        # HTTPProxy and SOCKSProxy are ConnectionPools too: each makes its connections,
        # the proxy's included, through its ``_network_backend``.
        if not isinstance(pool, httpcore.ConnectionPool):
            raise RuntimeError(f"httpx's transport holds a {type(pool)!r}, not a pool")
        if type(pool._network_backend) is not httpcore.SyncBackend or pool.connections:
            raise RuntimeError("the client's pool is not a fresh one over httpcore's backend")
        pools.append(pool)
    for pool in pools:
        pool._network_backend = DeadlineBackend(pool._network_backend)
    return client
