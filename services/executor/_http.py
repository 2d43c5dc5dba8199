"""The executor's HTTP plumbing to the checkpoint, shared by the feed and the outbox.

The client (:func:`checkpoint_client`), the backoff, the deadlines on a whole exchange,
the capped read of an answer and the mapping of a status to what the caller does:
:class:`Transient` (retry later), :class:`Unavailable` (retry later, for every request),
:class:`~services.executor.errors.CheckpointUnauthorized` (401/403). It reads no database
and decides nothing about an approval.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Final, Literal

import httpx

from airlock import apiclient

from .errors import CheckpointUnauthorized

__all__ = [
    "ANSWER_DEADLINE_S",
    "ANSWER_MAX_BYTES",
    "DETAIL_MAX",
    "PAGE_GRACE_S",
    "Backoff",
    "Idle",
    "Transient",
    "Unavailable",
    "check_auth",
    "checkpoint_client",
    "clip",
    "error_code",
    "feed_name",
    "no_idle",
    "read_at_most",
]

DETAIL_MAX: Final = 1000
#: How much of an answer other than a feed page is read: an error or an outcome's answer
#: is a small JSON object.
ANSWER_MAX_BYTES: Final = 64 * 1024
#: Deadlines on a whole exchange with the checkpoint — connect, TLS handshake, request,
#: status line, headers and body — counted from its start. httpx's timeouts bound one
#: socket operation each, so a checkpoint (or a proxy) sending a byte now and then could
#: otherwise hold the executor's one feed request, or a receipt's POST, for ever. Each is
#: kept on the wire (:mod:`airlock.httpdeadline`: every socket operation gets at most
#: what is left) and between the chunks of the body on the source's own clock. An
#: exchange whose status line and headers (and, for a feed page, whole body) are not in
#: by then fails as a checkpoint that is down does: backed off, nothing recorded.
#: A feed request's: the long-poll's wait, then this long.
PAGE_GRACE_S: Final = 15.0
#: A receipt POST's. The status decides; the body only explains it, and the part of it
#: that arrived in time is used if the deadline passes between two of its chunks.
ANSWER_DEADLINE_S: Final = 15.0

Idle = Callable[[], AbstractContextManager[None]]


def no_idle() -> AbstractContextManager[None]:
    return nullcontext()


def feed_name(base_url: str) -> str:
    """The cursor's key: a cursor means something only for one checkpoint's feed."""
    return base_url.rstrip("/")


def checkpoint_client(
    base_url: str,
    token: str,
    *,
    poll_wait_s: float,
    verify: ssl.SSLContext | Literal[True] = True,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """An HTTP client for the feed and the outcome API, with explicit timeouts.

    The read timeout outlasts the long-poll. Each socket operation is also cut to what is
    left of the deadline of the exchange under way (:func:`airlock.httpdeadline.within`,
    which the feed source and the outbox open around each request), so a checkpoint that
    sends its status line and headers, or anything else, a byte at a time holds no
    request past it.
    ``transport`` (for tests) replaces all of that, ``verify`` included.

    ``trust_env=False``: the bearer token is never routed through a proxy picked up from
    the environment, and ``SSL_CERT_FILE`` is not read either. TLS certificates and host
    names are always verified: against certifi's CA bundle (``verify=True``, httpx's
    default, said explicitly), or, for a checkpoint behind a private CA, against exactly
    the CA file the executor names (``AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE``, as
    :func:`airlock.tls.checkpoint_verify`'s context). There is no way to pass ``False``.

    No cookies: the token authenticates every request, and a ``Set-Cookie`` in an answer
    is neither kept nor sent back (``airlock.apiclient.checkpoint_http``'s ``cookies``).
    """
    return apiclient.checkpoint_http(
        base_url,
        verify=verify,
        timeout=httpx.Timeout(connect=5.0, read=poll_wait_s + PAGE_GRACE_S, write=10.0, pool=5.0),
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        trust_env=False,
        transport=transport,
        cookies=False,
    )


class Backoff:
    """Capped exponential backoff with jitter: 0.5 s, 1 s, 2 s, … up to ``cap``."""

    def __init__(
        self, *, base: float = 0.5, cap: float = 30.0, rng: Callable[[], float] = random.random
    ) -> None:
        if base <= 0 or cap < base:
            raise ValueError("backoff needs 0 < base <= cap")
        self._base, self._cap, self._rng = base, cap, rng
        self._failures = 0

    def failure(self) -> float:
        """Count a failure and return how long to wait before the next attempt."""
        delay = self.delay(self._failures)
        self._failures += 1
        return delay

    def delay(self, failures: int) -> float:
        """The wait after the ``failures + 1``-th failure in a row (this object counts
        nothing: the outbox keeps one count per receipt)."""
        delay = min(self._cap, self._base * 2.0 ** min(failures, 30))
        return delay * (0.5 + self._rng() / 2)  # jitter: several executors do not march

    def reset(self) -> None:
        self._failures = 0

    @property
    def failures(self) -> int:
        return self._failures


def read_at_most(
    response: httpx.Response, *, until: float, monotonic: Callable[[], float]
) -> bytes:
    """At most ``ANSWER_MAX_BYTES`` of an answer that is not a feed page, by ``until``
    (:func:`airlock.apiclient.read_at_most`): the status decides; this only explains it."""
    return apiclient.read_at_most(
        response, limit=ANSWER_MAX_BYTES, until=until, monotonic=monotonic
    )


def error_code(status: int, body: bytes) -> str:
    """The checkpoint's ``{"error": {"code": …}}``, or ``HTTP <status>``
    (:meth:`airlock.apiclient.Answer.error_code`)."""
    return apiclient.Answer(status, body).error_code()


def check_auth(status: int, body: bytes, what: str) -> None:
    if status in (401, 403):
        raise CheckpointUnauthorized(status, error_code(status, body), what)


class Transient(Exception):
    """The checkpoint is unreachable or answered something worth retrying."""


class Unavailable(Transient):
    """Not about one receipt: no answer at all (connection refused, a timeout) or an
    answer for the whole server (502/503/504 from it or a proxy in front, 429)."""


def clip(text: str, limit: int = DETAIL_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
