"""The one ASGI layer in front of the checkpoint's routes. Not public.

Every HTTP request passes, in this order:

1. the ``Host`` allowlist (:mod:`airlock.asgi`): a name the checkpoint is not reached by
   (DNS rebinding) is answered 400 ``E_HOST`` before anything else, and not counted;
2. the refusal budget of its bearer token (``refusals.RefusalRecorder``): a token whose
   budget is spent is refused 429 ``E_RATE_LIMITED`` (``Retry-After``) before routing,
   the body or the token's lookup, so a flood of them costs a hash and a dict lookup
   each; the refusal is counted (metrics, and the audit chain under the token's holder)
   like any other, and takes nothing from the budget;
3. the body cap: a body over ``max_bytes`` raises :class:`~airlock.asgi.BodyTooLarge`
   from ``receive`` (413 ``E_INVALID`` through the app's handler), at the first read when
   the declared ``Content-Length`` is over it (or not a number), else as soon as the bytes
   received pass it;
4. the count of its answer by method, route and status (``/metrics``).

One layer, not four: each layer is a call and a scan of the headers per request, and
the headers are read here once. This module must never log a header, a body or a token.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Final

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security.utils import get_authorization_scheme_param
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airlock.asgi import capped_receive, host_name

from .auth import Principal
from .errors import ErrorCode
from .refusals import RefusalRecorder, RefusedRequest

__all__ = ["Front", "token_key"]

#: The request methods counted by name (RFC 9110 §9, and PATCH); any other is "other".
_HTTP_METHODS: Final = frozenset(
    ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
)


def token_key(token: str) -> str:
    """Whose refusal budget a request bearing ``token`` spends: its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()


class Front:
    """The checkpoint's one middleware (see the module docstring).

    Args:
        hosts: the names the checkpoint is reached by (names, IPv4 or IPv6 literals;
            compared without the port, case-insensitively); a request with none of them,
            no ``Host`` or a malformed one is answered ``host_refusal`` (JSON), 400.
        max_bytes: the most a request body may hold.
        routes: the API's routes, to name the route of a rate-limited request.
        proposal_id: the pattern of a proposal id that a rate-limited request's
            audit record names.

    Raises:
        ValueError: ``hosts`` is empty (it would refuse every request).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: Iterable[str],
        host_refusal: bytes,
        max_bytes: int,
        routes: Sequence[BaseRoute],
        proposal_id: str,
    ) -> None:
        self.app = app
        self.hosts = frozenset(h.lower().strip("[]") for h in hosts)
        if not self.hosts:
            raise ValueError("an empty host allowlist would refuse every request")
        self.host_refusal = host_refusal
        self.max_bytes = max_bytes
        self.routes = routes
        self.proposal_id = re.compile(proposal_id)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = authorization = length = None
        for name, value in scope["headers"]:  # the first of each, as Starlette's Headers
            if name == b"host":
                host = value if host is None else host
            elif name == b"authorization":
                authorization = value if authorization is None else authorization
            elif name == b"content-length":
                length = value if length is None else length
        # (1) a name this checkpoint is reached by, before anything else is done
        if host is None or host_name(host.decode("latin-1")) not in self.hosts:
            await self._wrong_host(kind, send)
            return
        if kind != "http":
            await self.app(scope, receive, send)
            return
        # (2) a token whose refusal budget is spent
        if authorization is not None:
            scheme, token = get_authorization_scheme_param(authorization.decode("latin-1"))
            if scheme.lower() == "bearer" and token:
                recorder: RefusalRecorder = scope["app"].state.refusals
                limited = recorder.limited(token_key(token))
                if limited is not None:
                    await self._rate_limited(scope, receive, send, limited)
                    return
        # (3) the body cap, (4) the count
        declared = None if length is None else length.decode("latin-1")
        capped = capped_receive(receive, declared, self.max_bytes)
        status = 0

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.app(scope, capped, sent)
        path = getattr(scope.get("route"), "path", "unmatched")
        scope["app"].state.metrics.requests.labels(_method(scope), path, str(status)).inc()

    async def _wrong_host(self, kind: str, send: Send) -> None:
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(self.host_refusal)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": self.host_refusal})

    async def _rate_limited(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        limited: tuple[Principal, int],
    ) -> None:
        principal, retry_after = limited
        recorder: RefusalRecorder = scope["app"].state.refusals
        path, proposal_id = self._route_of(scope)
        metrics = scope["app"].state.metrics
        metrics.refusals.labels(ErrorCode.E_RATE_LIMITED.value).inc()
        metrics.requests.labels(_method(scope), path, "429").inc()
        write = recorder.refused(
            principal,
            RefusedRequest(
                by=principal.name,
                role=principal.role,
                code=ErrorCode.E_RATE_LIMITED.value,
                request=f"{scope['method']} {path}",
                proposal_id=proposal_id,
            ),
            token_key=None,
            charge=False,
        )
        if write is not None:
            await run_in_threadpool(write)
        response = JSONResponse(
            {
                "error": {
                    "code": ErrorCode.E_RATE_LIMITED.value,
                    "message": "too many refused requests with this token",
                }
            },
            status_code=429,
        )
        response.headers["Retry-After"] = str(retry_after)
        await response(scope, receive, send)

    def _route_of(self, scope: Scope) -> tuple[str, str | None]:
        """The template of the route ``scope`` is for ("unmatched" if none), and the
        proposal id it names when it names one that fits the pattern."""
        for route in self.routes:
            if isinstance(route, APIRoute):
                match, child = route.matches(scope)
                if match is not Match.NONE:
                    named = child.get("path_params", {}).get("proposal_id")
                    fits = isinstance(named, str) and self.proposal_id.fullmatch(named)
                    return route.path, named if fits else None
        return "unmatched", None


def _method(scope: Scope) -> str:
    # Labels only from fixed sets (route templates, the methods HTTP defines, status
    # codes): a client's made-up method names would each make a counter kept forever.
    method: str = scope["method"]
    return method if method in _HTTP_METHODS else "other"
