"""The sweep's hands on the running stack: propose, approve, inject faults, supervise.

Everything goes through the same doors an operator or attacker has: the checkpoint's API
(the agent's token, alice's and bob's sessions), devcloud's admin API, signals to the
service processes, and ``pg_terminate_backend`` from a separate superuser connection.
Nothing here edits a service's code or database.
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

from devstack.stack import ACCOUNT, PASSWORD, REGION, Stack

from ._schedule import Fault, Target

__all__ = ["DROP_DELAY_MS", "EXECUTOR_ENV", "Rig", "RigError", "action_for"]

#: The executor as the sweep runs it. Short lease and frequent recovery so a row left by
#: a crash is taken over within seconds; the lease must exceed twice the cloud timeouts
#: (ExecutorSettings refuses less), so 2 s over (200 + 700) ms.
EXECUTOR_ENV: Final = {
    "AIRLOCK_EXECUTOR_LEASE_SECONDS": "2",
    "AIRLOCK_EXECUTOR_RECOVER_EVERY": "1",
    "AIRLOCK_EXECUTOR_CLOUD_CONNECT_TIMEOUT_MS": "200",
    "AIRLOCK_EXECUTOR_CLOUD_READ_TIMEOUT_MS": "700",
}
#: A dropped answer (drop_mode=timeout) is withheld past the executor's read timeout.
DROP_DELAY_MS: Final = 1000
_READY_TIMEOUT: Final = 30.0
_PROTECT_TAG: Final = "airlock:protect"
#: When every target was created (and so last started): 2025-11-01, before observed_at.
_LAST_START: Final = 1_761_955_200


class RigError(Exception):
    """The stack did something the sweep cannot continue from (a violation by itself)."""


def action_for(target: Target) -> dict[str, Any]:
    """The ProposedAction the agent submits for ``target``."""
    params: dict[str, Any] = {"stopped_mode": "StopCharging"} if target.operation == "stop" else {}
    return {
        "type": "airlock.action/v1",
        "proposal_id": target.proposal_id,
        "provider": "alibaba",
        "account": ACCOUNT,
        "region": REGION,
        "resource": {"type": "ecs.instance", "id": target.resource_id},
        "operation": target.operation,
        "params": params,
        "precondition": {
            "status": target.initial_status,
            "absent_tags": [_PROTECT_TAG],
            "observed_at": "2026-11-29T06:00:00Z",
        },
        "evidence": {"policy": "idle/v1", "window_days": 14, "cpu_p95_bp": 340},
        "reason": "fault sweep",
        "proposed_by": "agent:scanner-1",
        "created_at": "2026-11-29T06:00:05Z",
    }


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Rig:
    """One running stack, driven by one thread (the sweep is sequential by design: every
    concurrency in a seed is the stack's own, between its processes)."""

    def __init__(self, stack: Stack, *, pg_admin_url: str | None = None) -> None:
        self.stack = stack
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
        """Create the target's own instance in devcloud and submit its proposal."""
        # Created, and so last started, before the action's observed_at: the executor
        # refuses to delete an instance started since its state was observed.
        self.stack.devcloud.admin.create_instance(
            target.resource_id, status=target.initial_status, created_at=_LAST_START
        )
        return self.stack.submit(action_for(target))

    def approve(self, target: Target, proposal: Mapping[str, Any]) -> tuple[str, float]:
        """Vote until the approval is issued: (approval id, time.time() of the answer)."""
        voters = ("alice",) if target.operation == "stop" else ("alice", "bob")
        body: dict[str, Any] = {"action_hash": proposal["action_hash"]}
        if target.operation == "delete":
            body["confirm"] = target.resource_id  # the typed id a high-risk approve needs
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
        admin = self.stack.devcloud.admin
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
            case "devcloud.fail":
                admin.set_faults(fail_next_writes=fault.n, fail_kind=fault.arg)
                return f"next {fault.n} writes fail with {fault.arg}"
            case "devcloud.drop":
                admin.set_faults(
                    drop_next_writes=fault.n, drop_mode=fault.arg, drop_delay_ms=DROP_DELAY_MS
                )
                return f"next {fault.n} writes apply, then the answer is dropped ({fault.arg})"
            case "devcloud.latency":
                admin.set_faults(write_latency_ms=fault.n)
                return f"writes delayed {fault.n} ms"
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
                rid = targets[fault.target].resource_id
                if fault.arg == "status":
                    other = "Stopped" if targets[fault.target].operation == "stop" else "Running"
                    admin.set_instance(rid, status=other)
                elif fault.arg == "protect":
                    admin.set_instance(rid, add_tags=[(_PROTECT_TAG, "true")])
                else:
                    admin.delete_instance(rid)
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
        self.stack.devcloud.admin.reset_faults()

    def logs(self, tail: int = 60) -> str:
        out = []
        for service in (self.stack.executor, self.stack.checkpoint):
            lines = service.log().splitlines()[-tail:]
            out.append(f"--- {service.name} log (last {len(lines)} lines) ---")
            out.extend(lines)
        return "\n".join(out)
