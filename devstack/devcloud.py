"""Run devcloud as a real subprocess, and talk to its admin API.

Usage (tests, eval, bench)::

    from devstack.devcloud import running_devcloud

    with running_devcloud(tmp_path, instances=40, rds=8, seed=3) as dc:
        reader = dc.reader()                 # AlibabaReader with the read key
        writer = dc.writer()                 # AlibabaWriter with the write key
        dc.admin.create_instance("i-test0001", status="Stopped")
        writer.delete_ecs(dc.region, "i-test0001", client_token="apv_1")
        assert len(dc.admin.writes(resource_id="i-test0001")) == 1
        dc.admin.set_faults(fail_next_writes=1, fail_kind="throttling")

The server is uvicorn on a free 127.0.0.1 port running devcloud's app factory
(``services.devcloud.app:app_from_env``, the app ``airlock devcloud serve`` runs), with
the admin API enabled and a fresh admin token; it is stopped on exit.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader
from airlock.cloud.alibaba.writer import AlibabaWriter
from airlock.settings import DEVCLOUD_READ_KEY, DEVCLOUD_WRITE_KEY

from .ports import free_port

__all__ = ["DevcloudAdmin", "DevcloudHandle", "free_port", "running_devcloud"]

REGION = "ap-southeast-1"
_READY_TIMEOUT = 30.0


@dataclass
class DevcloudAdmin:
    """The test-only admin API (bearer token)."""

    base_url: str
    token: str
    _client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self._client = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30.0,
        )

    def close(self) -> None:
        self._client.close()

    def _ok(self, response: httpx.Response) -> Any:
        response.raise_for_status()
        return response.json()

    def writes(
        self, *, resource_id: str | None = None, action: str | None = None
    ) -> list[dict[str, Any]]:
        """The write log: every effect devcloud applied, oldest first."""
        params = {k: v for k, v in (("resource_id", resource_id), ("action", action)) if v}
        return list(self._ok(self._client.get("/_admin/writes", params=params))["writes"])

    def faults(self) -> dict[str, Any]:
        return dict(self._ok(self._client.get("/_admin/faults")))

    def set_faults(self, **changes: Any) -> dict[str, Any]:
        """Merge fault settings (reset with :meth:`reset_faults`).

        latency_ms / write_latency_ms: added delay; fail_next_writes / fail_next_reads: the
        next N calls fail before any effect with fail_kind ``unavailable`` (503
        ServiceUnavailable), ``internal`` (500 InternalError) or ``throttling`` (400
        Throttling.User); drop_next_writes: the next N writes take effect and are logged,
        then the answer is withheld for drop_delay_ms (drop_mode ``timeout``, the caller's
        read timeout fires) or cut mid-body (drop_mode ``reset``).
        """
        return dict(self._ok(self._client.post("/_admin/faults", json=changes)))

    def reset_faults(self) -> None:
        self._ok(self._client.delete("/_admin/faults"))

    def truth(self) -> dict[str, str]:
        """Ground-truth class of every instance (idle, busy, bursty, protected, ...)."""
        return dict(self._ok(self._client.get("/_admin/truth"))["truth"])

    def seed(
        self,
        *,
        seed: int,
        instances: int,
        rds: int = 0,
        now: int | None = None,
        regions: Sequence[str] = (REGION,),
        replace: bool = True,
    ) -> int:
        body = {
            "seed": seed,
            "instances": instances,
            "rds": rds,
            "now": int(time.time()) if now is None else now,
            "regions": list(regions),
            "replace": replace,
        }
        return int(self._ok(self._client.post("/_admin/seed", json=body))["added"])

    def create_instance(
        self,
        instance_id: str,
        *,
        kind: str = "ecs",
        region: str = REGION,
        status: str = "Running",
        tags: Sequence[tuple[str, str]] = (),
        name: str | None = None,
        created_at: int | None = None,
        profile: str = "idle",
    ) -> None:
        item: dict[str, Any] = {
            "id": instance_id,
            "kind": kind,
            "region": region,
            "status": status,
            "tags": [list(t) for t in tags],
            "profile": profile,
        }
        if name is not None:
            item["name"] = name
        if created_at is not None:
            item["created_at"] = created_at
        self._ok(self._client.post("/_admin/instances", json={"instances": [item]}))

    def set_instance(
        self,
        instance_id: str,
        *,
        status: str | None = None,
        tags: Sequence[tuple[str, str]] | None = None,
        add_tags: Sequence[tuple[str, str]] = (),
        remove_tags: Sequence[str] = (),
        started_at: int | None = None,
    ) -> dict[str, Any]:
        """Change an instance out of band (never in the write log). Starting it (status
        Running or Starting from any other status) sets its StartTime to devcloud's now,
        or to ``started_at`` (Unix seconds) when given; other changes ignore it."""
        body: dict[str, Any] = {
            "add_tags": [list(t) for t in add_tags],
            "remove_tags": list(remove_tags),
        }
        if status is not None:
            body["status"] = status
        if tags is not None:
            body["tags"] = [list(t) for t in tags]
        if started_at is not None:
            body["started_at"] = started_at
        return dict(self._ok(self._client.patch(f"/_admin/instances/{instance_id}", json=body)))

    def delete_instance(self, instance_id: str) -> None:
        """Delete out of band (never in the write log)."""
        self._ok(self._client.delete(f"/_admin/instances/{instance_id}"))


@dataclass
class DevcloudHandle:
    endpoint: str  # host:port, what AlibabaConfig.endpoint takes
    base_url: str
    read_key: tuple[str, str]
    write_key: tuple[str, str]
    admin: DevcloudAdmin
    db_path: Path
    pid: int
    region: str = REGION

    def config(
        self, key: tuple[str, str], *, read_timeout_ms: int = 2_000, connect_timeout_ms: int = 1_000
    ) -> AlibabaConfig:
        return AlibabaConfig(
            access_key_id=key[0],
            access_key_secret=key[1],
            endpoint=self.endpoint,
            protocol="http",
            connect_timeout_ms=connect_timeout_ms,
            read_timeout_ms=read_timeout_ms,
        )

    def reader(
        self, *, key: tuple[str, str] | None = None, read_timeout_ms: int = 5_000
    ) -> AlibabaReader:
        return AlibabaReader(self.config(key or self.read_key, read_timeout_ms=read_timeout_ms))

    def writer(
        self, *, key: tuple[str, str] | None = None, read_timeout_ms: int = 2_000
    ) -> AlibabaWriter:
        return AlibabaWriter(self.config(key or self.write_key, read_timeout_ms=read_timeout_ms))

    def env(self, prefix: str, *, write: bool) -> dict[str, str]:
        """``AIRLOCK_<PREFIX>_CLOUD_*`` variables pointing a service subprocess here."""
        key = self.write_key if write else self.read_key
        return {
            f"AIRLOCK_{prefix}_CLOUD_ENDPOINT": self.endpoint,
            f"AIRLOCK_{prefix}_CLOUD_PROTOCOL": "http",
            f"AIRLOCK_{prefix}_CLOUD_ACCESS_KEY_ID": key[0],
            f"AIRLOCK_{prefix}_CLOUD_ACCESS_KEY_SECRET": key[1],
        }


@contextlib.contextmanager
def running_devcloud(
    workdir: Path,
    *,
    instances: int = 0,
    rds: int = 0,
    seed: int = 1,
    now: int | None = None,
    regions: Sequence[str] = (REGION,),
    transition_seconds: float = 0.3,
) -> Iterator[DevcloudHandle]:
    """Seed (optionally) and start devcloud in a subprocess; yield a handle; kill it."""
    workdir.mkdir(parents=True, exist_ok=True)
    db_path = workdir / "devcloud.db"
    if instances or rds:
        from services.devcloud import Store, seed_store

        store = Store(db_path, transition_seconds=transition_seconds)
        seed_store(
            store,
            seed=seed,
            instances=instances,
            rds=rds,
            now=int(time.time()) if now is None else now,
            regions=tuple(regions),
        )
        store.close()
    token = secrets.token_hex(16)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env.update(
        {
            "AIRLOCK_ENV": "dev",
            "AIRLOCK_DEVCLOUD_ADMIN_TOKEN": token,
            "AIRLOCK_DEVCLOUD_TRANSITION_SECONDS": str(transition_seconds),
            "AIRLOCK_DEVCLOUD_DB_PATH": str(db_path),
            "AIRLOCK_DEVCLOUD_ENABLE_ADMIN": "true",
        }
    )
    log = (workdir / "devcloud.log").open("wb")
    # uvicorn on devcloud's factory, as `airlock devcloud serve` runs it, without loading
    # the whole CLI (whose other commands are none of these tests' business).
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "services.devcloud.app:app_from_env",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--log-level",
        "warning",
        "--timeout-graceful-shutdown",
        "1",
    ]
    # cwd=workdir so no stray .env of the checkout leaks into the server's settings.
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    admin = DevcloudAdmin(base_url, token)
    try:
        _wait_ready(proc, base_url, workdir / "devcloud.log")
        yield DevcloudHandle(
            endpoint=f"127.0.0.1:{port}",
            base_url=base_url,
            read_key=DEVCLOUD_READ_KEY,
            write_key=DEVCLOUD_WRITE_KEY,
            admin=admin,
            db_path=db_path,
            pid=proc.pid,
        )
    finally:
        admin.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()


def _wait_ready(proc: subprocess.Popen[bytes], base_url: str, log_path: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"devcloud exited early:\n{log_path.read_text(errors='replace')}"
                )
            try:
                if client.get(f"{base_url}/_health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # readiness polling, bounded by the deadline; not a race wait
    proc.kill()
    raise RuntimeError(
        f"devcloud not ready in {_READY_TIMEOUT}s:\n{log_path.read_text(errors='replace')}"
    )
