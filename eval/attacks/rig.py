"""The processes the attacks run against, and the judge's eyes on them.

One :class:`Rig` per suite run, started once and shared by every attack, against one
cloud (:mod:`eval.attacks.clouds`: devcloud, or a moto server with IAM enforced):

* the whole stack of :func:`devstack.stack.running_stack` — the checkpoint (``cp``),
  the executor daemon fed by its feed (E1) writing to the cloud, and the web app;
* a second executor daemon (E2) on the **same ledger**, reading bundles from an inbox
  directory: how an attacker who holds bundle bytes presents them (and the "second
  executor sharing the ledger" of the replay attacks). Restartable;
* three more checkpoints with databases of their own that no executor listens to, so an
  approval they issue stays unused until an attack presents it: ``hold`` (production
  audience), ``short`` (production audience, 2-second execution window, 2-second
  sessions) and ``staging`` (another audience). They sign with a second key that E2
  trusts, beside the main checkpoint's key.

The judge reads the cloud's own record of writes, the executor ledger database and each
checkpoint's database (read-only SQLite connections; the attacks that edit a checkpoint
database say so). Everything started here is stopped on exit, by process id.

This module must never write to the cloud itself, and never weaken a service's settings
beyond what its attack names (window lengths, audiences).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import httpx

from airlock.protocol import KeySet, canonical_bytes
from airlock.store import verify_chain
from devstack.ports import free_port
from devstack.stack import (
    ACCOUNT,
    AUDIENCE,
    PASSWORD,
    REGION,
    Stack,
    prepare_checkpoint_accounts,
    running_stack,
)
from services.checkpoint.keys import KeyDirectory
from services.executor import generate_receipt_key

from .clouds import AttackCloud, CloudName, DevcloudCloud, MotoCloud, moto_server

__all__ = [
    "ACCOUNT",
    "AUDIENCE",
    "CLI",
    "PASSWORD",
    "REGION",
    "STAGING_AUDIENCE",
    "USERS",
    "Checkpoint",
    "ExecResult",
    "Rig",
    "bundle_of",
    "deadline_poll",
    "free_port",
    "restart_checkpoint",
    "rig_env",
    "started_rig",
]

#: People on every checkpoint. ``dave`` also appears as a proposer (self-approval).
USERS: Final = {
    "alice": "approver",
    "bob": "approver",
    "carol": "approver",
    "dave": "approver",
    "vic": "viewer",
    "admin": "admin",
}
STAGING_AUDIENCE: Final = "airlock-executor/staging"
_READY_TIMEOUT: Final = 60.0
_WAIT: Final = 30.0
CLI: Final = [sys.executable, "-c", "from airlock.cli import main; main()"]
_REPO: Final = Path(__file__).resolve().parents[2]

T = TypeVar("T")


def deadline_poll(
    what: str, probe: Callable[[], T | None], timeout: float = _WAIT, step: float = 0.02
) -> T:
    """Poll ``probe`` until it returns something other than None, or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not observed within {timeout}s")
        time.sleep(step)  # polling observable state under a deadline, not waiting out a race


def bundle_of(record: Mapping[str, Any]) -> bytes:
    """The bundle an executor receives for an approved proposal, from its public record.

    Any reader of the checkpoint (a viewer too) sees the action bytes and the envelope:
    the bundle is a bearer artefact, and the attacks use it exactly so.
    """
    approval = record["approval"]
    value = {
        "action": base64.b64encode(record["action_jcs"].encode("utf-8")).decode("ascii"),
        "envelope": approval["envelope"],
    }
    return canonical_bytes(value)


def rig_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "EXECFEED_"))}
    env["PYTHONPATH"] = str(_REPO)
    env["AIRLOCK_ENV"] = "dev"
    env.update(extra)
    return env


class _Proc:
    """One child process with its log; stopped by its own pid."""

    def __init__(self, name: str, cmd: list[str], env: Mapping[str, str], workdir: Path) -> None:
        self.name = name
        self.cmd = cmd
        self.env = dict(env)
        self.workdir = workdir
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            # cwd=workdir: no stray .env of the checkout leaks into the settings.
            self.proc = subprocess.Popen(
                self.cmd, cwd=self.workdir, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


def _wait_url(proc: _Proc, url: str) -> None:
    def probe() -> bool | None:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited early:\n{proc.log()}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=1.0, trust_env=False).status_code == 200:
                return True
        return None

    deadline_poll(f"{proc.name} ready", probe, timeout=_READY_TIMEOUT, step=0.05)


def _ro(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    return conn


def _rw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=10, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


def audit_events(db: Path, event_type: str, **match: Any) -> list[dict[str, Any]]:
    """Audit events of ``event_type`` in the chain of database ``db`` whose fields match."""
    with contextlib.closing(_ro(db)) as conn:
        rows = conn.execute("SELECT event FROM audit_log ORDER BY seq").fetchall()
    out = []
    for row in rows:
        event = json.loads(row["event"])
        if event.get("type") == event_type and all(event.get(k) == v for k, v in match.items()):
            out.append(event)
    return out


@dataclass
class Checkpoint:
    """One running checkpoint: its URL, database and credentials."""

    name: str
    url: str
    db_path: Path
    tokens: dict[str, str]
    audience: str
    http: httpx.Client = field(init=False)
    _sessions: dict[str, str] = field(default_factory=dict)
    proc: _Proc | None = None
    #: Sign in again for every request (for a checkpoint with very short sessions).
    fresh_sessions: bool = False

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.url, timeout=30.0, trust_env=False)

    def login(self, user: str, *, fresh: bool = False) -> str:
        if fresh or self.fresh_sessions or user not in self._sessions:
            r = self.http.post("/v1/sessions", json={"username": user, "password": PASSWORD})
            if r.status_code != 201:
                raise RuntimeError(f"login {user} at {self.name}: {r.status_code} {r.text}")
            self._sessions[user] = str(r.json()["token"])
        return self._sessions[user]

    def bearer(self, who: str) -> dict[str, str]:
        """``who`` is a service (agent/executor) or a person (a session is opened)."""
        token = self.tokens.get(who) or self.login(who)
        return {"Authorization": f"Bearer {token}"}

    def submit_raw(self, body: bytes, who: str = "agent") -> httpx.Response:
        return self.http.post(
            "/v1/proposals",
            content=body,
            headers={**self.bearer(who), "Content-Type": "application/json"},
        )

    def submit(self, action: Mapping[str, Any]) -> dict[str, Any]:
        r = self.submit_raw(json.dumps(action).encode())
        if r.status_code not in (200, 201):
            raise RuntimeError(f"submit at {self.name}: {r.status_code} {r.text}")
        body: dict[str, Any] = r.json()
        return body

    def approve_raw(
        self,
        pid: str,
        who: str,
        action_hash: str,
        *,
        confirm: str | None = None,
        note: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        body: dict[str, Any] = {"action_hash": action_hash, "note": note}
        if confirm is not None:
            body["confirm"] = confirm
        return self.http.post(
            f"/v1/proposals/{pid}/approve",
            json=body,
            headers=dict(headers) if headers is not None else self.bearer(who),
        )

    def approve(self, record: Mapping[str, Any], *who: str, confirm: bool = False) -> None:
        for person in who:
            r = self.approve_raw(
                record["id"],
                person,
                record["action_hash"],
                confirm=record["resource_id"] if confirm else None,
            )
            if r.status_code != 200:
                raise RuntimeError(f"approve by {person} at {self.name}: {r.status_code} {r.text}")

    def view(self, pid: str) -> dict[str, Any]:
        r = self.http.get(f"/v1/proposals/{pid}", headers=self.bearer("agent"))
        if r.status_code != 200:
            raise RuntimeError(f"view {pid} at {self.name}: {r.status_code} {r.text}")
        body: dict[str, Any] = r.json()
        return body

    def wait_state(self, pid: str, states: set[str], timeout: float = _WAIT) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            record = self.view(pid)
            return record if record["state"] in states else None

        return deadline_poll(f"{self.name} {pid} in {sorted(states)}", probe, timeout, 0.05)

    def refusal_count(self, code: str) -> float:
        """The checkpoint's Prometheus counter of refused requests with ``code``."""
        text = self.http.get("/metrics").text
        m = re.search(
            r'^airlock_checkpoint_refusals_total\{code="' + re.escape(code) + r'"\} (\S+)$',
            text,
            re.M,
        )
        return float(m.group(1)) if m else 0.0

    def audit(self, event_type: str, **match: Any) -> list[dict[str, Any]]:
        return audit_events(self.db_path, event_type, **match)

    def sql(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Edit this checkpoint's database directly, in one transaction (an attacker's
        write access to the database, not to the signing key)."""
        with contextlib.closing(_rw(self.db_path)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            for sql, args in statements:
                conn.execute(sql, args)
            conn.execute("COMMIT")

    def close(self) -> None:
        self.http.close()


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What the executor's ledger says about one presented bundle."""

    code: str  # a RefusalCode value, or the ledger state (succeeded, ...)
    approval_id: str | None
    bundle_sha256: str


class Rig:
    """The live processes and the judge's readers (see the module docstring)."""

    def __init__(
        self, stack: Stack, workdir: Path, aux: dict[str, Checkpoint], cloud: AttackCloud
    ) -> None:
        self.stack = stack
        self.workdir = workdir
        self.cloud = cloud
        self.cp = Checkpoint(
            "checkpoint",
            stack.checkpoint_url,
            stack.workdir / "checkpoint.db",
            dict(stack.tokens),
            AUDIENCE,
        )
        self.hold = aux["hold"]
        self.short = aux["short"]
        self.staging = aux["staging"]
        self.ledger_path = _ledger_path(stack)
        self.webapp_url = stack.webapp_url
        self.inbox = workdir / "e2-inbox"
        self.inbox.mkdir(exist_ok=True)
        self._dropped = 0
        self.trusted_keys = workdir / "e2-trusted-keys.json"
        self.aux_keys_dir = workdir / "aux-keys"
        #: The receipt key set the aux checkpoints trust (each refuses to start without one).
        self.aux_receipt_keys = workdir / AUX_RECEIPT_KEYS
        self.e2: _Proc | None = None
        #: What an attack's setup left for its run (keyed by attack name).
        self.scratch: dict[str, Any] = {}

    # -- the cloud ------------------------------------------------------------------

    def instance(self, instance_id: str, **kw: Any) -> str:
        """Make the attack's instance exist (:meth:`AttackCloud.instance`); its id."""
        return self.cloud.instance(instance_id, **kw)

    def writes(self, resource_id: str) -> int:
        return self.cloud.writes(resource_id)

    # -- executors -----------------------------------------------------------------

    def executor_env(self, trusted_keys: Path, **extra: str) -> dict[str, str]:
        return rig_env(
            {
                "AIRLOCK_EXECUTOR_DATABASE_URL": f"sqlite:///{self.ledger_path}",
                "AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH": str(trusted_keys),
                "AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH": str(self.stack.workdir / "receipt-key.pem"),
                "AIRLOCK_EXECUTOR_AUDIENCE": AUDIENCE,
                "AIRLOCK_EXECUTOR_ACCOUNT": ACCOUNT,
                "AIRLOCK_EXECUTOR_REGION": REGION,
                "AIRLOCK_EXECUTOR_POLL_WAIT": "1",
                **self.cloud.executor_env,
                **extra,
            }
        )

    def start_e2(self) -> None:
        if self.e2 is None:
            self.e2 = _Proc(
                "executor-2",
                [*CLI, "executor"],
                self.executor_env(self.trusted_keys, AIRLOCK_EXECUTOR_INBOX=str(self.inbox)),
                self.workdir,
            )
        else:
            self.e2.start()
        # Ready when it has drained a probe: its first pass runs recovery, then the inbox.
        self.present(b"{}", "readiness-probe")

    def restart_e2(self) -> None:
        if self.e2 is not None:
            self.e2.stop()
        self.start_e2()

    def present(self, raw: bytes, label: str) -> ExecResult:
        """Drop ``raw`` into E2's inbox and return what the ledger recorded for it."""
        self._dropped += 1
        name = f"{self._dropped:04d}-{label}.json"
        tmp = self.inbox / f".{name}.tmp"
        tmp.write_bytes(raw)
        os.replace(tmp, self.inbox / name)
        done = self.inbox / "done" / name

        def processed() -> bool | None:
            if self.e2 is not None and not self.e2.alive():
                raise RuntimeError(f"executor-2 died:\n{self.e2.log()}")
            return True if done.exists() else None

        deadline_poll(f"executor-2 processed {name}", processed)
        return self.result_of(raw)

    def result_of(self, raw: bytes) -> ExecResult:
        # The DirectorySource reads at most cap+1 bytes; the sha is over what it read.
        sha = "sha256:" + hashlib.sha256(raw[: (64 * 1024) + 1]).hexdigest()
        with contextlib.closing(_ro(self.ledger_path)) as conn:
            refusal = conn.execute(
                "SELECT code, approval_id FROM executor_refusals WHERE bundle_sha256 = ?"
                " ORDER BY id DESC LIMIT 1",
                (sha,),
            ).fetchone()
            row = conn.execute(
                "SELECT approval_id, state, refusal_code FROM executor_ledger WHERE bundle = ?",
                (raw,),
            ).fetchone()
        if refusal is not None:
            return ExecResult(str(refusal["code"]), refusal["approval_id"], sha)
        if row is not None:
            return ExecResult(str(row["refusal_code"] or row["state"]), row["approval_id"], sha)
        return ExecResult("NOT_RECORDED", None, sha)

    def ledger_row(self, approval_id: str) -> sqlite3.Row | None:
        with contextlib.closing(_ro(self.ledger_path)) as conn:
            row: sqlite3.Row | None = conn.execute(
                "SELECT * FROM executor_ledger WHERE approval_id = ?", (approval_id,)
            ).fetchone()
        return row

    def refusals(self, **match: Any) -> list[sqlite3.Row]:
        where = " AND ".join(f"{k} = ?" for k in match) or "1 = 1"
        with contextlib.closing(_ro(self.ledger_path)) as conn:
            return list(
                conn.execute(
                    f"SELECT * FROM executor_refusals WHERE {where} ORDER BY id",
                    tuple(match.values()),
                ).fetchall()
            )

    def executor_audit(self, event_type: str, **match: Any) -> list[dict[str, Any]]:
        return audit_events(self.ledger_path, event_type, **match)

    def wait_executed_by_e1(self, approval_id: str, states: set[str]) -> sqlite3.Row:
        def probe() -> sqlite3.Row | None:
            row = self.ledger_row(approval_id)
            return row if row is not None and row["state"] in states else None

        return deadline_poll(f"ledger row {approval_id} in {sorted(states)}", probe)

    # -- whole-run checks ----------------------------------------------------------

    def chains(self) -> dict[str, bool]:
        """Does every audit chain of the run still verify?"""
        out: dict[str, bool] = {}
        for name, path in (
            ("executor ledger", self.ledger_path),
            ("checkpoint", self.cp.db_path),
            ("checkpoint hold", self.hold.db_path),
            ("checkpoint short", self.short.db_path),
            ("checkpoint staging", self.staging.db_path),
        ):
            from airlock.store import make_engine

            engine = make_engine(f"sqlite:///{path}")
            try:
                out[name] = verify_chain(engine).ok
            finally:
                engine.dispose()
        return out

    def close(self) -> None:
        if self.e2 is not None:
            self.e2.stop()
        for c in (self.cp, self.hold, self.short, self.staging):
            c.close()
            if c.proc is not None:
                c.proc.stop()


def _ledger_path(stack: Stack) -> Path:
    url = getattr(stack, "ledger_url", None)
    if isinstance(url, str) and url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    for candidate in ("ledger.db", "executor.db"):
        path = stack.workdir / candidate
        if path.exists():
            return path
    raise RuntimeError(f"no executor ledger database found in {stack.workdir}")


#: Aux checkpoints get no outcomes, but a checkpoint refuses to start without a receipt
#: key set: they trust a receipt key of their own that no executor holds.
AUX_RECEIPT_KEYS: Final = "aux-receipt-keys.json"


def _aux_receipt_keys(workdir: Path) -> Path:
    signer = generate_receipt_key(workdir / "aux-receipt-key.pem")
    path = workdir / AUX_RECEIPT_KEYS
    path.write_bytes(canonical_bytes(KeySet([signer.trusted_key()]).to_value()))
    return path


def _prepare_aux(workdir: Path, keys_dir: Path) -> tuple[dict[str, str], Path]:
    """A checkpoint database with the people of :data:`USERS` and an agent token."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(keys_dir, workdir / "keys")
    db_path = workdir / "checkpoint.db"
    tokens = prepare_checkpoint_accounts(f"sqlite:///{db_path}", USERS)
    return tokens, db_path


def _spawn_aux(
    name: str, workdir: Path, keys_dir: Path, audience: str, **settings: str
) -> Checkpoint:
    home = workdir / name
    tokens, db_path = _prepare_aux(home, keys_dir)
    port = free_port()
    env = rig_env(
        {
            "AIRLOCK_CHECKPOINT_DATABASE_URL": f"sqlite:///{db_path}",
            "AIRLOCK_CHECKPOINT_KEYS_DIR": str(home / "keys"),
            "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH": str(workdir / AUX_RECEIPT_KEYS),
            "AIRLOCK_CHECKPOINT_AUDIENCE": audience,
            "AIRLOCK_CHECKPOINT_FEED_MAX_WAIT": "1",
            **{f"AIRLOCK_CHECKPOINT_{k.upper()}": v for k, v in settings.items()},
        }
    )
    proc = _Proc(f"checkpoint-{name}", [*CLI, "checkpoint", "--port", str(port)], env, home)
    cp = Checkpoint(name, f"http://127.0.0.1:{port}", db_path, tokens, audience)
    cp.proc = proc
    cp.fresh_sessions = "session_ttl" in settings
    return cp


def restart_checkpoint(cp: Checkpoint) -> None:
    """Stop and start an aux checkpoint (its sweeper runs once at start)."""
    if cp.proc is None:
        raise RuntimeError(f"{cp.name} is not ours to restart")
    cp.proc.stop()
    cp.proc.start()
    _wait_url(cp.proc, f"{cp.url}/readyz")


@contextlib.contextmanager
def started_rig(workdir: Path, cloud: CloudName = "devcloud") -> Iterator[Rig]:
    """Start everything (aux checkpoints alongside the stack, the executors writing to
    ``cloud``), yield the rig, stop it all."""
    workdir.mkdir(parents=True, exist_ok=True)
    aux_keys = workdir / "aux-keys"
    KeyDirectory(aux_keys).generate(int(time.time()))
    _aux_receipt_keys(workdir)
    aux = {
        "hold": _spawn_aux("hold", workdir, aux_keys, AUDIENCE),
        "short": _spawn_aux(
            "short", workdir, aux_keys, AUDIENCE, execution_window="2", session_ttl="2"
        ),
        "staging": _spawn_aux("staging", workdir, aux_keys, STAGING_AUDIENCE),
    }
    rig: Rig | None = None
    try:
        with contextlib.ExitStack() as started:
            moto = None
            if cloud == "moto":
                moto = MotoCloud(started.enter_context(moto_server(workdir / "moto")))
            stack = started.enter_context(
                running_stack(
                    workdir / "stack",
                    users=USERS,
                    executor_env=None if moto is None else moto.executor_env,
                    devcloud=moto is None,
                )
            )
            for cp in aux.values():
                assert cp.proc is not None
                _wait_url(cp.proc, f"{cp.url}/readyz")
            rig = Rig(stack, workdir, aux, moto or DevcloudCloud(stack.devcloud))
            main_keys = KeySet.from_value(rig.cp.http.get("/v1/keys").raise_for_status().json())
            aux_set = KeyDirectory(aux_keys).public_keyset()
            rig.trusted_keys.write_bytes(
                canonical_bytes(KeySet([*main_keys.values(), *aux_set.values()]).to_value())
            )
            rig.start_e2()
            yield rig
    finally:
        if rig is not None:
            rig.close()
        else:
            for cp in aux.values():
                cp.close()
                if cp.proc is not None:
                    cp.proc.stop()
