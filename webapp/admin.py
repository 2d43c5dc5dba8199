"""The audit chain and the checkpoint's signing keys, as the checkpoint answers them."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from .deps import Session, WebDep

__all__ = ["router"]

router = APIRouter()


@router.get("/audit", response_class=HTMLResponse)
def audit(request: Request, web: WebDep, session: Session) -> Response:
    chain = web.client.audit(session.token)
    return web.render(request, "audit.html", {"me": session.me, "nav": "audit", "chain": chain})


@router.get("/keys", response_class=HTMLResponse)
def keys(request: Request, web: WebDep, session: Session) -> Response:
    return web.render(
        request, "keys.html", {"me": session.me, "nav": "keys", "keys": web.client.keys()}
    )
