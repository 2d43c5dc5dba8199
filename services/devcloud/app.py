"""devcloud's HTTP face: the Alibaba Cloud RPC API subset Airlock uses, plus a test admin API.

The official SDKs call ``POST /?<params>`` with ``x-acs-action``, ``x-acs-version`` and an
``ACS3-HMAC-SHA256`` ``Authorization`` header. devcloud, in this order: (1) verifies the
signature, the date skew and the nonce; (2) routes by version (ECS ``2014-05-26``, RDS
``2014-08-15``, CloudMonitor ``2019-01-01``) and action; (3) checks the key's scope like
a RAM policy — the read key may only call Describe*/List*/metrics, the write key may also
stop and delete; (4) applies injected faults; (5) answers in Alibaba's shapes, errors as
``{"RequestId", "HostId", "Code", "Message", "Recommend"}`` with Alibaba's status codes.

Alibaba serves each region at its own endpoint, and some writes (ECS ``StopInstance``)
carry no ``RegionId``: the endpoint is their region. devcloud serves every region on one
port, so the adapter names the region of the endpoint it stands for in
``x-acs-region-id``; a write acts only on a resource of its region (``RegionId``, else that
header) and any other is not found, as at a real regional endpoint. The write log records
every parameter of each write exactly as received.

The admin API (``/_admin/*``, bearer token, off unless enabled) exposes the write log,
fault injection, out-of-band changes and the seeded fleet's ground truth. It must never
be reachable without its token, and no admin change ever appears in the write log.

This module holds the route, fault injection (4) and the error body; steps (1)–(3) and
the actions are :class:`services.devcloud.actions.Api`; the admin API is
:mod:`services.devcloud.admin`; the JSON shapes are :mod:`services.devcloud.wire`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Final

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from airlock.settings import DevcloudSettings

from .actions import REGION_HEADER, Api, first_header, header_lists
from .admin import add_admin_routes
from .errors import AcsError
from .fleet import generate_fleet
from .store import Store
from .wire import JsonObject

__all__ = ["ACCOUNT_ID", "app_from_env", "create_app"]

#: The account devcloud serves unless ``AIRLOCK_DEVCLOUD_ACCOUNT`` names another.
ACCOUNT_ID: Final = "5123456789012345"
_PRODUCTS: Final = {"2014-05-26": "ecs", "2014-08-15": "rds", "2019-01-01": "cms"}
_FAULT_ERRORS: Final = {
    "unavailable": (
        "ServiceUnavailable",
        "The request has failed due to a temporary failure of the server.",
        503,
    ),
    "internal": (
        "InternalError",
        "The request processing has failed due to some unknown error.",
        500,
    ),
    "throttling": ("Throttling.User", "Request was denied due to user flow control.", 400),
}


def _request_id() -> str:
    """A random (version 4) UUID in upper case, as Alibaba's RequestId: ``uuid.uuid4()``
    without building a UUID object."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # RFC 4122 §4.4: version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # and the variant
    h = raw.hex().upper()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class _ConnectionCut(Exception):
    """Raised mid-body so the server drops the connection (apply-then-drop, reset mode)."""


async def _cut_short(result: JsonObject) -> AsyncIterator[bytes]:
    body = json.dumps(result).encode()
    yield body[: len(body) // 2]
    raise _ConnectionCut("apply-then-drop fault: connection cut after the effect")


def _error(exc: AcsError, request_id: str, host: str) -> JSONResponse:
    return JSONResponse(
        {
            "RequestId": request_id,
            "HostId": host,
            "Code": exc.code,
            "Message": exc.message,
            "Recommend": f"https://api.aliyun.com/troubleshoot?q={exc.code}",
        },
        status_code=exc.status,
    )


def create_app(
    settings: DevcloudSettings,
    *,
    store: Store | None = None,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    store = store or Store(
        settings.db_path, transition_seconds=settings.transition_seconds, clock=clock
    )
    api = Api(settings, store, clock)
    app = FastAPI(title="devcloud", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.store = store
    app.state.seeded = _seed_on_start(settings, store, int(clock()))

    @app.get("/_health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    async def rpc(request: Request) -> Response:
        request_id = _request_id()
        headers = header_lists(request.scope["headers"])
        host = headers["host"][0] if "host" in headers else "devcloud"
        body = await request.body()
        try:
            key_id, scope = api.authenticate(request, body, headers)
            product = _PRODUCTS.get(first_header(headers, "x-acs-version"))
            action = first_header(headers, "x-acs-action")
            if product is None:
                raise AcsError("InvalidVersion", "Specified parameter Version is not valid.", 400)
            is_write = api.authorize(scope, product, action)
            params = dict(request.query_params)
            if body and first_header(headers, "content-type").startswith(
                "application/x-www-form-urlencoded"
            ):
                form = await request.form()
                params.update({k: str(v) for k, v in form.items()})
            faults = store.get_faults()
            delay = faults.latency_ms + (faults.write_latency_ms if is_write else 0)
            if delay:
                await asyncio.sleep(delay / 1000)
            failing = store.consume_fault(
                "fail_next_writes" if is_write else "fail_next_reads", faults
            )
            if failing is not None:
                code, message, status = _FAULT_ERRORS.get(
                    failing.fail_kind, _FAULT_ERRORS["unavailable"]
                )
                raise AcsError(code, message, status)
            result = api.dispatch(
                product,
                action,
                params,
                key_id,
                request_id,
                endpoint_region=first_header(headers, REGION_HEADER) or None,
            )
        except AcsError as exc:
            return _error(exc, request_id, host)
        if is_write:
            dropping = store.consume_fault("drop_next_writes", faults)
            if dropping is not None and dropping.drop_mode == "reset":
                return StreamingResponse(_cut_short(result), media_type="application/json")
            if dropping is not None:
                # Apply-then-drop: the effect is committed and logged; the caller's read
                # timeout fires long before this answer comes.
                await asyncio.sleep(dropping.drop_delay_ms / 1000)
        return JSONResponse(result)

    # A plain Starlette route: rpc takes the Request and answers a Response, so FastAPI's
    # per-request dependency solving and response handling have nothing to do (they cost
    # a twentieth of a call). Starlette adds HEAD beside GET: the API serves GET and POST.
    app.router.add_route("/", rpc, methods=["GET", "POST"])
    route = app.router.routes[-1]
    if not isinstance(route, Route) or route.endpoint is not rpc:
        raise RuntimeError("the RPC route was not added last")
    route.methods = {"GET", "POST"}
    add_admin_routes(app, settings, store)
    return app


def _seed_on_start(settings: DevcloudSettings, store: Store, now: int) -> int:
    """Seed ``settings.seed_instances`` ECS instances (and a tenth as many RDS) into a
    database never seeded before, as ``airlock devcloud seed`` would with its default
    seed; the number added. A seeded one is kept as it is, so a restart loses nothing."""
    if not settings.seed_instances or store.get_meta("seed"):
        return 0
    fleet = generate_fleet(
        seed=1,
        instances=settings.seed_instances,
        rds=settings.seed_instances // 10,
        now=now,
        regions=settings.seed_regions,
    )
    # The fleet first: a start that dies in between then fails loudly on the next
    # (the same instances again), rather than serving an empty fleet for good.
    added = store.add_instances(fleet)
    store.set_meta("seed", "1")
    return added


def app_from_env() -> FastAPI:
    """uvicorn ``--factory`` entry: settings from ``AIRLOCK_DEVCLOUD_*`` (dev only)."""
    settings = DevcloudSettings()
    settings.db_path.parent.mkdir(parents=True, exist_ok=True)
    return create_app(settings)
