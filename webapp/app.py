"""The web app's assembly: the checkpoint client, the middleware, the error pages, the routers.

Each request is made to the checkpoint with the token from the person's own session
cookie; the server keeps no session, no token and no secret of its own between
requests. Every POST is checked for a same-origin CSRF token before anything is sent to
the checkpoint, and every decision goes to the checkpoint, which is the only judge: a
button hidden or disabled here is a convenience, never the control.

The routes live in one router per concern: ``signin``, ``queue`` (the queue and the
history), ``proposals`` (a proposal and the decisions on it), ``bulk`` and ``admin``
(the audit chain and the keys); what they share is in ``deps``, the error pages in
``handlers``.

This package must never log a cookie, a token or a password, must never render a value
without escaping (autoescape is on for every template), and must never import a service.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from airlock.asgi import BodyLimit, HostAllowlist
from airlock.settings import WebappSettings, answered_hosts
from airlock.tls import checkpoint_verify

from . import admin, bulk, handlers, notifications, proposals, queue, signin
from .client import CheckpointClient
from .deps import Web

__all__ = ["create_app"]

_HERE: Final = Path(__file__).parent
#: Every request body. The largest form a person sends is a decision with a 2000-character
#: note, percent-encoded UTF-8: under 30 KiB.
_FORM_MAX_BYTES: Final = 64 * 1024


def create_app(
    settings: WebappSettings | None = None,
    *,
    transport: Any = None,
    now: Callable[[], float] = time.time,
) -> FastAPI:
    """The ASGI app.

    Args:
        settings: the web app's settings; read from the environment when None.
        transport: an httpx transport to the checkpoint, for tests to stand in a fake one.
        now: the clock, in seconds since the epoch.
    """
    settings = settings or WebappSettings()
    client = CheckpointClient(
        settings.checkpoint_url,
        timeout=settings.checkpoint_timeout,
        verify=checkpoint_verify(settings.checkpoint_ca_file),
        transport=transport,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            client.close()

    app = FastAPI(
        title="Airlock web app",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.client = client
    app.state.web = Web(settings, client, now)
    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")
    # Forms are parsed before the CSRF token or the session is looked at: a body over
    # the cap is refused (413) at the first read, never held in memory or spooled to disk.
    app.add_middleware(BodyLimit, max_bytes=_FORM_MAX_BYTES)
    handlers.install(app)
    for module in (signin, queue, bulk, proposals, admin, notifications):
        app.include_router(module.router)
    # Outermost: a page from another name (DNS rebinding to a loopback web app) is
    # answered before anything reads its cookies.
    app.add_middleware(
        HostAllowlist,
        hosts=answered_hosts(settings.allowed_hosts, settings.host),
        body=b"E_HOST: unknown Host\n",
        content_type="text/plain; charset=utf-8",
    )
    return app
