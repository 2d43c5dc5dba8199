"""``airlock webapp``: serve the human review surface (FastAPI + Jinja2, port 3000).

The web app is imported inside the command, never at module import
(docs/architecture.md#import-boundaries).
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["webapp_command"]


def webapp_command(
    *,
    host: Annotated[
        str | None, typer.Option(metavar="ADDRESS", help="Bind address (default 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 3000).")] = None,
    checkpoint_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Checkpoint API base URL (AIRLOCK_WEBAPP_CHECKPOINT_URL). Over https its "
            "certificate is verified against certifi's CA bundle, or against exactly the PEM "
            "file AIRLOCK_WEBAPP_CHECKPOINT_CA_FILE when set (a private CA); SSL_CERT_FILE "
            "is not read.",
        ),
    ] = None,
) -> None:
    """Serve the web app where people review, approve and reject proposals."""
    import logging.config

    import uvicorn

    from airlock.settings import WebappSettings
    from airlock.tls import CAFileError
    from webapp.app import create_app

    from ._settings import load
    from ._text import inert_log_config

    changes = {
        k: v
        for k, v in (("host", host), ("port", port), ("checkpoint_url", checkpoint_url))
        if v is not None
    }
    base = load(WebappSettings, **changes)
    # Before the app is built: what building it logs is escaped too (uvicorn applies the
    # same configuration again when it starts).
    logging.config.dictConfig(inert_log_config("WARNING"))
    # proxy_headers stays off: X-Forwarded-Proto from an untrusted client must not make
    # the app believe it is on HTTPS. Behind a TLS proxy, set AIRLOCK_WEBAPP_SECURE_COOKIES.
    try:
        app = create_app(base)
    except CAFileError as exc:  # the settings read it; changed since
        typer.echo(f"webapp: AIRLOCK_WEBAPP_CHECKPOINT_CA_FILE={exc}", err=True)
        raise typer.Exit(2) from None
    uvicorn.run(
        app,
        host=base.host,
        port=base.port,
        log_level="warning",
        # Every line escaped (airlock.text), a traceback's too: its text can be a request's.
        log_config=inert_log_config("WARNING"),
        proxy_headers=False,
        server_header=False,
    )
