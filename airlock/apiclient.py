"""One client core for the checkpoint API: the transport, the deadline, the strict answer,
and the ``{"error": {"code", "message"}}`` mapping, shared by every client of the
checkpoint (the agent's, the CLI's, the web app's, the executor's feed and outbox).

Error hierarchy::

    ApiError                    root of what talking to the checkpoint raises here
    ├── CheckpointRefused       an answer in the API's {"error": {"code", "message"}} form
    └── CheckpointUnavailable   no answer in time, or an answer that is not the API

Each client keeps its own error tree by subclassing these two, so a caller holding any
client can catch ``ApiError``; what a client does with an answer (retry, an exit code, a
page) stays with it.

- :func:`checkpoint_http` builds the one kind of ``httpx.Client`` every client uses:
  TLS verified (``True``: certifi, or a CA file's context; never off), no redirects
  (one would carry the token elsewhere), every socket operation bounded by the deadline
  of the exchange under way (:mod:`airlock.httpdeadline`).
- :func:`exchange` sends one request under a deadline for the whole exchange, reads at
  most ``max_bytes`` of the answer, and returns an :class:`Answer`; a transport error or
  the deadline is :class:`CheckpointUnavailable`.
- :class:`Answer` parses strictly (docs/protocol.md#strict-json: never httpx's
  ``json()``, which keeps the last of duplicate keys) and maps an error body.

This module must never log or show a token, and imports no service, web app, storage or
settings. It imports only the standard library when loaded (httpx and the kernel's parser
inside the calls), so the CLI's error tree can subclass its errors and ``airlock --help``
still pays for neither.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ANSWER_MAX_BYTES",
    "Answer",
    "ApiError",
    "CheckpointRefused",
    "CheckpointUnavailable",
    "NotStrictJSON",
    "checkpoint_http",
    "exchange",
    "read_at_most",
]

#: The largest answer read: a page of 200 proposals, each with its action text (at most
#: 16 KiB canonical, escaped once more as a string), is a few MiB.
ANSWER_MAX_BYTES: Final = 32 * 1024 * 1024
#: An error code longer than this, or not printable ASCII, is not the API's.
_CODE_MAX: Final = 64


class ApiError(Exception):
    """Root of what talking to the checkpoint raises."""


class CheckpointRefused(ApiError):
    """The checkpoint's refusal: its stable ``code``, its ``message`` and the HTTP status."""

    def __init__(
        self, code: str, message: str, status: int, *, retry_after: int | None = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        #: The answer's ``Retry-After``, in seconds, when it had one (E_THROTTLED, E_BUSY).
        self.retry_after = retry_after


class CheckpointUnavailable(ApiError):
    """No answer (a transport error, the deadline), or an answer that is not the API.

    ``cause`` is httpx's error when there was no answer at all, else None."""

    def __init__(self, message: str, *, cause: httpx.HTTPError | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class NotStrictJSON(ValueError):
    """An answer's body is not strict JSON; ``code`` and ``detail`` are the parser's."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def checkpoint_http(
    base_url: str,
    *,
    verify: ssl.SSLContext | Literal[True] = True,
    timeout: httpx.Timeout | float,
    headers: Mapping[str, str] | None = None,
    trust_env: bool = False,
    transport: httpx.BaseTransport | None = None,
    cookies: bool = True,
) -> httpx.Client:
    """An ``httpx.Client`` for the checkpoint.

    Args:
        verify: ``True`` (certifi's bundle; also ``SSL_CERT_FILE`` with ``trust_env``)
            or the context of one CA file (:func:`airlock.tls.checkpoint_verify`).
        timeout: httpx's per-operation timeouts; the whole exchange is bounded by
            :func:`exchange`'s deadline.
        trust_env: keep httpx's proxies and ``SSL_CERT_FILE`` from the environment (the
            agent and the CLI, run by a person or a job); off for the web app and the
            executor, which hold tokens that must not be routed elsewhere.
        transport: a test's transport; replaces the deadline-bounded sockets.
        cookies: keep the cookies answers set and send them back (httpx's default);
            ``False`` for a client that authenticates with a bearer token alone: it
            keeps and sends none, and does not parse answers for them.

    Raises:
        TypeError: ``verify`` is neither ``True`` nor an ``ssl.SSLContext``.
    """
    import httpx

    from airlock.httpdeadline import with_deadlines

    if verify is not True and not isinstance(verify, ssl.SSLContext):
        raise TypeError("verify must be True or an ssl.SSLContext; verification stays on")
    from airlock._nocookies import CookielessClient

    client = (httpx.Client if cookies else CookielessClient)(
        base_url=base_url,
        headers=dict(headers or {}),
        timeout=timeout,
        trust_env=trust_env,
        verify=verify,
        # A redirect from the checkpoint would carry the bearer token elsewhere.
        follow_redirects=False,
        transport=transport,
    )
    if transport is None:  # a test's transport has no sockets to bound
        with_deadlines(client)
    return client


def read_at_most(
    response: httpx.Response,
    *,
    limit: int,
    until: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> bytes:
    """The first ``limit`` bytes of a streamed answer's body, or what arrived by its
    deadline: ``until`` (a ``monotonic`` time) or the exchange's on the wire, whichever
    notices first. The rest is never read, so a broken checkpoint or a proxy in front can
    neither exhaust memory with one nor hold the caller by dripping it."""
    import httpx

    from airlock.httpdeadline import deadline_passed

    body = bytearray()
    try:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) >= limit or monotonic() > until:
                break
    except httpx.ReadTimeout:
        if not deadline_passed():  # a read timeout of its own: the answer never came
            raise
    return bytes(body[:limit])


@dataclass(frozen=True, slots=True)
class Answer:
    """The checkpoint's answer to one exchange: its status and (capped) body."""

    status: int
    body: bytes
    #: The answer's body was cut at :func:`exchange`'s ``max_bytes``.
    cut: bool = False
    #: The answer's ``Retry-After`` in seconds, when it was a plain number.
    retry_after: int | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self, *, max_bytes: int = ANSWER_MAX_BYTES) -> Any:
        """The body parsed strictly (docs/protocol.md#strict-json), or raise
        :class:`NotStrictJSON`. Not NFC is allowed: the API relays text it did not write
        (a person's note), and nothing here is signed."""
        from airlock.protocol import Refused, loads_strict

        try:
            return loads_strict(self.body, max_bytes=max_bytes, nfc=False)
        except Refused as exc:
            raise NotStrictJSON(exc.code.value, exc.detail) from None

    def refusal(self) -> CheckpointRefused | None:
        """The API's ``{"error": {"code": str, "message": str}}`` as an exception to raise,
        or None when the body is not that."""
        try:
            body = self.json()
        except NotStrictJSON:
            return None
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            return None
        code, message = error.get("code"), error.get("message")
        if not isinstance(code, str) or not isinstance(message, str):
            return None
        return CheckpointRefused(code, message, self.status, retry_after=self.retry_after)

    def error_code(self) -> str:
        """The error's code, fit to store and show (printable ASCII, at most 64
        characters), or ``HTTP <status>``."""
        from airlock.protocol import Refused, loads_strict

        try:
            code = loads_strict(self.body, max_bytes=len(self.body) + 1, nfc=False)["error"]["code"]
        except (Refused, KeyError, TypeError):
            return f"HTTP {self.status}"
        # A NUL cannot be stored in PostgreSQL text, and an escape sequence must not
        # reach an operator's terminal.
        if (
            isinstance(code, str)
            and code.isascii()
            and code.isprintable()
            and len(code) <= _CODE_MAX
        ):
            return code
        return f"HTTP {self.status}"


def exchange(
    http: httpx.Client,
    method: str,
    path: str,
    *,
    deadline_s: float,
    max_bytes: int = ANSWER_MAX_BYTES,
    **kwargs: Any,
) -> Answer:
    """Send one request; the whole exchange (connect, TLS handshake, request, status
    line, headers, body) is over within ``deadline_s``.

    At most ``max_bytes`` of the body are read (``Answer.cut`` says it was cut).
    ``kwargs`` go to ``httpx.Client.stream`` (``json``, ``content``, ``params``,
    ``headers``).

    Raises:
        CheckpointUnavailable: an HTTP error (a transport error, the deadline passed
            before the answer was in); its message is ``<ErrorType>: <httpx's message>``
            and its ``cause`` httpx's error.
        httpx.InvalidURL: the base URL or path cannot be requested.
    """
    import httpx

    from airlock.httpdeadline import within

    until = time.monotonic() + deadline_s
    try:
        with within(deadline_s), http.stream(method, path, **kwargs) as response:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    return Answer(
                        response.status_code,
                        bytes(body[:max_bytes]),
                        cut=True,
                        retry_after=_retry_after(response.headers.get("retry-after", "")),
                    )
                if time.monotonic() > until:
                    raise httpx.ReadTimeout("the deadline for the whole exchange passed")
            return Answer(
                response.status_code,
                bytes(body),
                retry_after=_retry_after(response.headers.get("retry-after", "")),
            )
    except httpx.HTTPError as exc:
        raise CheckpointUnavailable(f"{type(exc).__name__}: {exc}", cause=exc) from None


def _retry_after(value: str) -> int | None:
    """``Retry-After`` as delay-seconds (RFC 9110 §10.2.3); an HTTP-date or junk is None."""
    return int(value) if value.isdigit() and len(value) < 10 else None
