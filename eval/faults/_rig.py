"""The sweep's hands on the running stack: propose, approve, inject faults, supervise.

Everything goes through the same doors an operator or attacker has: the checkpoint's API
(the agent's token, alice's and bob's sessions), the cloud double's admin doors
(:mod:`._clouds`), signals to the service processes, and ``pg_terminate_backend`` from a
separate superuser connection. Nothing here edits a service's code or database.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import httpx
import psycopg
from sqlalchemy.engine import make_url

from devstack.stack import PASSWORD, Stack

from ._clouds import Cloud
from ._schedule import Fault, Target

__all__ = ["Rig", "RigError"]

_READY_TIMEOUT: Final = 30.0


class RigError(Exception):
    """The stack did something the sweep cannot continue from (a violation by itself)."""


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Rig:
    """One running stack, driven by one thread (the sweep is sequential by design: every
    concurrency in a seed is the stack's own, between its processes)."""

    def __init__(self, stack: Stack, cloud: Cloud, *, pg_admin_url: str | None = None) -> None:
        self.stack = stack
        self.cloud = cloud
        #: Each prepared target's resource id at the cloud, and back.
        self.ids: dict[str, str] = {}
        self.targets: dict[str, Target] = {}
        self.http = httpx.Client(base_url=stack.checkpoint_url, timeout=30.0, trust_env=False)
        self.pg_admin_url = pg_admin_url
        self.armed: str | None = None  # the failpoint the running executor carries
        self.crashes: Counter[str] = Counter()  # executor deaths seen, by armed point
        self._sessions: dict[str, str] = {}
        self._heartbeat = Path(stack.executor.env["AIRLOCK_EXECUTOR_HEARTBEAT_PATH"])

    def close(self) -> None:
        self.http.close()

    # -- people and the agent, through the API ------------------------------------------

    def _login(self, name: str) -> str:
        r = self.http.post("/v1/sessions", json={"username": name, "password": PASSWORD})
        if r.status_code != 201:
            raise RigError(f"login {name}: HTTP {r.status_code} {r.text}")
        token = str(r.json()["token"])
        self._sessions[name] = token
        return token

    def _as(self, name: str, method: str, path: str, body: Mapping[str, Any]) -> httpx.Response:
        token = self._sessions.get(name) or self._login(name)
        r = self.http.request(method, path, json=body, headers={"Authorization": f"Bearer {token}"})
        if r.status_code == 401:  # a session outlived by a long sweep: sign in again
            token = self._login(name)
            r = self.http.request(
                method, path, json=body, headers={"Authorization": f"Bearer {token}"}
            )
        return r

    def prepare(self, target: Target) -> dict[str, Any]:
        """Create the target's own resource at the cloud and submit its proposal."""
        rid = self.cloud.create(target)
        self.ids[target.proposal_id] = rid
        self.targets[rid] = target
        return self.stack.submit(self.cloud.action(target, rid))

    def resource_id(self, target: Target) -> str:
        return self.ids[target.proposal_id]

    def approve(self, target: Target, proposal: Mapping[str, Any]) -> tuple[str, float]:
        """Vote until the approval is issued: (approval id, time.time() of the answer)."""
        voters = ("alice",) if target.operation == "stop" else ("alice", "bob")
        body: dict[str, Any] = {"action_hash": proposal["action_hash"]}
        if target.operation == "delete":
            body["confirm"] = self.resource_id(target)  # the typed id a high-risk approve needs
        record: dict[str, Any] = {}
        for who in voters:
            r = self._as(who, "POST", f"/v1/proposals/{proposal['id']}/approve", body)
            if r.status_code != 200:
                raise RigError(f"approve {proposal['id']} as {who}: HTTP {r.status_code} {r.text}")
            record = r.json()
        answered = time.time()
        if record.get("state") != "approved" or not record.get("approval"):
            raise RigError(f"{proposal['id']} not approved after {voters}: {record.get('state')}")
        return str(record["approval"]["approval_id"]), answered

    def view(self, proposal_id: str) -> dict[str, Any]:
        return self.stack.agent_view(proposal_id)

    # -- the executor's life --------------------------------------------------------------

    def _wait_executor(self) -> bool:
        """Until this start has beaten its heartbeat (recovered, serving) or died."""
        ex = self.stack.executor
        deadline = time.monotonic() + _READY_TIMEOUT
        while time.monotonic() < deadline:
            if not ex.running:
                return False
            try:
                if self._heartbeat.stat().st_mtime >= ex.started_at:
                    return True
            except FileNotFoundError:
                pass
            time.sleep(0.02)  # readiness polling under a deadline
        raise RigError(f"executor not ready in {_READY_TIMEOUT}s")

    def start_executor(self, armed: str | None = None) -> None:
        """(Re)start the executor, armed at one failpoint or not; a running one gets SIGTERM."""
        ex = self.stack.executor
        if ex.running and ex.stop(signal.SIGTERM) == -signal.SIGKILL and self.armed:
            # It reached its point while finishing the item in hand after the SIGTERM.
            self.crashes[self.armed] += 1
        self.armed = armed
        ex.spawn(**({"AIRLOCK_EXECUTOR_FAILPOINTS": armed} if armed else {}))
        if not self._wait_executor():
            self.supervise()  # died at its failpoint during start-up recovery

    def supervise(self) -> None:
        """Restart a dead executor, unarmed, as a process supervisor would.

        Only an armed executor may die on its own: any other exit is a bug and stops the
        sweep.
        """
        ex = self.stack.executor
        if ex.running:
            return
        code = ex.proc.returncode if ex.proc is not None else None
        if self.armed is None or code != -signal.SIGKILL:
            raise RigError(f"executor exited on its own (code {code}, armed {self.armed})")
        self.crashes[self.armed] += 1
        self.armed = None
        ex.spawn()
        if not self._wait_executor():
            raise RigError(
                f"unarmed executor died during start (code {ex.proc and ex.proc.returncode})"
            )

    def disarm(self) -> None:
        """Seed end: an executor still carrying an unfired failpoint is restarted without it."""
        self.supervise()
        if self.armed is not None:
            self.start_executor(None)

    # -- faults ---------------------------------------------------------------------------

    def inject(self, fault: Fault, targets: tuple[Target, ...]) -> str:
        """Apply one fault; return a short note of what it did (for a failure report)."""
        match fault.kind:
            case "executor.failpoint":
                self.supervise()
                self.start_executor(fault.arg)
                return f"executor restarted armed at {fault.arg}"
            case "executor.sigkill":
                self.supervise()
                # A fault's timing, not a wait for a race: kill a few ms into whatever the
                # executor is doing with the approval just issued.
                time.sleep(fault.n / 1000)
                self.stack.executor.kill()
                self.armed = None
                self.start_executor(None)
                return f"executor SIGKILLed after {fault.n} ms and restarted"
            case "devcloud.fail" | "devcloud.drop" | "devcloud.latency":
                return self.cloud.inject(fault)
            case "checkpoint.restart":
                sig = signal.SIGKILL if fault.arg == "SIGKILL" else signal.SIGTERM
                self.stack.checkpoint.stop(sig)
                self.stack.checkpoint.start()
                return f"checkpoint stopped by {fault.arg} and restarted"
            case "postgres.cut":
                time.sleep(fault.n / 1000)  # the fault's timing, as for executor.sigkill
                cut = self.cut_ledger_connections()
                return f"{cut} ledger connections terminated after {fault.n} ms"
            case "drift":
                target = targets[fault.target]
                rid = self.resource_id(target)
                self.cloud.drift(target, rid, fault.arg)
                return f"{rid} changed out of band ({fault.arg})"
        raise RigError(f"unknown fault kind {fault.kind}")

    def cut_ledger_connections(self) -> int:
        """Terminate every backend on the ledger's database except this one."""
        if self.pg_admin_url is None:
            raise RigError("postgres.cut needs the ledger on PostgreSQL")
        database = make_url(self.stack.ledger_url).database
        with psycopg.connect(_libpq(self.pg_admin_url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            ).fetchone()
        return int(row[0]) if row else 0

    def reset_cloud_faults(self) -> None:
        self.cloud.reset_faults()

    def logs(self, tail: int = 60) -> str:
        out = []
        for service in (self.stack.executor, self.stack.checkpoint):
            lines = service.log().splitlines()[-tail:]
            out.append(f"--- {service.name} log (last {len(lines)} lines) ---")
            out.extend(lines)
        return "\n".join(out)
