"""devcloud's test admin API (``/_admin/*``): the write log, fault injection, out-of-band
changes and the seeded fleet's ground truth.

Every route answers 404 while the admin API is off (``enable_admin`` unset or no token)
and 401 without ``Authorization: Bearer <admin token>``, before its body is read. A body
is parsed once into its model (:mod:`services.devcloud.wire`); one that does not parse is
422 ``{"detail": <why>}``. No admin change ever appears in the write log.
"""

from __future__ import annotations

import dataclasses
import hmac
import time
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from airlock.settings import DevcloudSettings

from .fleet import InstanceSpec, generate_fleet
from .store import Faults, Store
from .wire import FaultsChange, InstanceChange, NewInstances, SeedRequest

__all__ = ["add_admin_routes"]

_M = TypeVar("_M", bound=BaseModel)

#: How old an instance created through the admin API is when its request gives no age.
_DEFAULT_AGE_SECONDS = 30 * 86_400


def _invalid(exc: ValidationError) -> JSONResponse:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return JSONResponse({"detail": f"{where}: {first['msg']}" if where else first["msg"]}, 422)


async def _parse(model: type[_M], request: Request) -> _M | JSONResponse:
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        return _invalid(exc)


class _Admin:
    """The admin routes over one store; each checks the token first."""

    def __init__(self, settings: DevcloudSettings, store: Store) -> None:
        self.enabled = settings.enable_admin
        self.token = settings.admin_token.get_secret_value() if settings.admin_token else ""
        self.store = store

    def guard(self, request: Request) -> JSONResponse | None:
        if not self.enabled or not self.token:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            return JSONResponse({"detail": "unauthorized"}, status_code=401)
        return None

    async def writes(self, request: Request) -> Response:
        return self.guard(request) or JSONResponse(
            {
                "writes": self.store.write_log(
                    resource_id=request.query_params.get("resource_id"),
                    action=request.query_params.get("action"),
                )
            }
        )

    async def faults(self, request: Request) -> Response:
        denied = self.guard(request)
        if denied:
            return denied
        if request.method == "DELETE":
            self.store.set_faults(Faults())
        elif request.method == "POST":
            change = await _parse(FaultsChange, request)
            if isinstance(change, JSONResponse):
                return change
            changed = dataclasses.replace(
                self.store.get_faults(), **change.model_dump(exclude_none=True)
            )
            self.store.set_faults(changed)
        return JSONResponse(self.store.get_faults().to_json())

    async def truth(self, request: Request) -> Response:
        return self.guard(request) or JSONResponse({"truth": self.store.truth()})

    async def seed(self, request: Request) -> Response:
        denied = self.guard(request)
        if denied:
            return denied
        spec = await _parse(SeedRequest, request)
        if isinstance(spec, JSONResponse):
            return spec
        fleet = generate_fleet(
            seed=spec.seed,
            instances=spec.instances,
            rds=spec.rds,
            now=int(time.time()) if spec.now is None else spec.now,
            regions=spec.regions,
        )
        if spec.replace:
            self.store.clear_instances()
        self.store.set_meta("seed", str(spec.seed))
        return JSONResponse({"added": self.store.add_instances(fleet)})

    async def create_instances(self, request: Request) -> Response:
        denied = self.guard(request)
        if denied:
            return denied
        body = await _parse(NewInstances, request)
        if isinstance(body, JSONResponse):
            return body
        now = int(time.time())
        specs = [
            InstanceSpec(
                id=i.id,
                kind=i.kind,
                region=i.region,
                name=i.id if i.name is None else i.name,
                status=i.status,
                instance_type=i.instance_type,
                created_at=now - _DEFAULT_AGE_SECONDS if i.created_at is None else i.created_at,
                tags=i.tags,
                truth=i.truth,
                profile=i.profile,
                has_memory=i.has_memory,
            )
            for i in body.instances
        ]
        return JSONResponse({"added": self.store.add_instances(specs)})

    async def change_instance(self, request: Request) -> Response:
        denied = self.guard(request)
        if denied:
            return denied
        iid = request.path_params["instance_id"]
        if request.method == "DELETE":
            try:
                self.store.admin_update(iid, delete=True)
            except KeyError:
                return JSONResponse({"detail": f"no instance {iid}"}, status_code=404)
            return JSONResponse({"deleted": iid})
        change = await _parse(InstanceChange, request)
        if isinstance(change, JSONResponse):
            return change
        try:
            inst = self.store.admin_update(
                iid,
                status=change.status,
                tags=change.tags,
                add_tags=change.add_tags,
                remove_tags=change.remove_tags,
                started_at=change.started_at,
            )
        except KeyError:
            return JSONResponse({"detail": f"no instance {iid}"}, status_code=404)
        assert inst is not None  # only delete returns None
        return JSONResponse(
            {"id": inst.id, "status": inst.status, "tags": [list(t) for t in inst.tags]}
        )


def add_admin_routes(app: FastAPI, settings: DevcloudSettings, store: Store) -> None:
    """Mount ``/_admin/*`` on ``app``; off (404) unless ``settings`` enable it with a token."""
    admin = _Admin(settings, store)
    app.add_api_route("/_admin/writes", admin.writes, methods=["GET"])
    app.add_api_route("/_admin/faults", admin.faults, methods=["GET", "POST", "DELETE"])
    app.add_api_route("/_admin/truth", admin.truth, methods=["GET"])
    app.add_api_route("/_admin/seed", admin.seed, methods=["POST"])
    app.add_api_route("/_admin/instances", admin.create_instances, methods=["POST"])
    app.add_api_route(
        "/_admin/instances/{instance_id}", admin.change_instance, methods=["PATCH", "DELETE"]
    )
