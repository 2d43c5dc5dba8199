"""Builders and test doubles for the executor tests (importable by child processes).

``InMemoryCloud`` and ``FakeFileCloud`` are test doubles of the cloud ports; the file one
keeps its state in a SQLite file so several OS processes share one write counter (the
judge of exactly-once until the devcloud integration tests run the real adapter).
Never use the seeds here for anything but tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.engine import Engine

from airlock.cloud.ports import (
    IncorrectState,
    LiveState,
    MetricPoint,
    ResourceNotFound,
    ResourceType,
    UnknownOutcome,
    WriteResult,
)
from airlock.protocol import (
    ApprovalStatement,
    Binding,
    KeySet,
    ProposedAction,
    make_bundle,
)
from airlock.store import make_engine
from services.checkpoint.signer import Signer
from services.executor import Backoff, Executor, Failpoints, ReceiptSigner, Shutdown
from services.executor.sources import OutcomeSink

APPROVAL_SEED: Final = hashlib.sha256(b"airlock test approval key").digest()
RECEIPT_SEED: Final = hashlib.sha256(b"airlock test receipt key").digest()
AUDIENCE: Final = "airlock-executor/test-ap-southeast-1"
ACCOUNT: Final = "5123456789012345"
REGION: Final = "ap-southeast-1"
#: The last start the test clouds report for every instance: before any observation.
LAST_START: Final = "2025-01-01T00:00:00Z"
BINDING: Final = Binding(AUDIENCE, "alibaba", ACCOUNT, REGION)
T0: Final = 1764400000
TTL: Final = 900
LEASE: Final = 60


def approval_signer() -> Signer:
    return Signer.from_seed(APPROVAL_SEED)


def keyset() -> KeySet:
    return KeySet([approval_signer().trusted_key()])


def receipt_signer() -> ReceiptSigner:
    return ReceiptSigner(Ed25519PrivateKey.from_private_bytes(RECEIPT_SEED))


def receipt_keyset() -> KeySet:
    return KeySet([receipt_signer().trusted_key()])


def instance_id(n: int, tag: str = "") -> str:
    return f"i-t4n{tag}{n:08d}"


@dataclass(frozen=True)
class Bundle:
    raw: bytes
    approval_id: str
    resource_id: str
    resource_type: str
    operation: str


def make_test_bundle(
    n: int,
    *,
    tag: str = "x",
    operation: str = "stop",
    resource_type: str = "ecs.instance",
    issued_at: int = T0,
    ttl: int = TTL,
    audience: str = AUDIENCE,
    status: str = "Running",
) -> Bundle:
    """Bundle number ``n`` of the series ``tag`` (lowercase alphanumerics): unique ids."""
    rid = instance_id(n, tag) if resource_type == "ecs.instance" else f"rm-{tag}{n:08d}"
    params: dict[str, Any] = (
        {"stopped_mode": "StopCharging"}
        if (resource_type, operation) == ("ecs.instance", "stop")
        else {}
    )
    action = ProposedAction.model_validate(
        {
            "type": "airlock.action/v1",
            "proposal_id": f"prop_{tag}{n:08d}{operation}",
            "provider": "alibaba",
            "account": ACCOUNT,
            "region": REGION,
            "resource": {"type": resource_type, "id": rid},
            "operation": operation,
            "params": params,
            "precondition": {
                "status": status,
                "absent_tags": ["airlock:protect"],
                "observed_at": "2025-11-29T06:00:00Z",
            },
            "evidence": {"policy": "idle/v1", "window_days": 14, "cpu_p95_bp": 340},
            "reason": "Idle 14 days",
            "proposed_by": "agent:test",
            "created_at": "2025-11-29T06:00:05Z",
        }
    )
    approval_id = f"apv_{tag}{n:08d}{operation}"
    statement = ApprovalStatement.model_validate(
        {
            "type": "airlock.approval/v1",
            "approval_id": approval_id,
            "proposal_id": action.proposal_id,
            "action_hash": action.action_hash(),
            "provider": "alibaba",
            "account": ACCOUNT,
            "region": REGION,
            "resource": {"type": resource_type, "id": rid},
            "operation": operation,
            "audience": audience,
            "nonce": hashlib.sha256(approval_id.encode()).hexdigest()[:32],
            "issued_at": issued_at,
            "not_before": issued_at,
            "expires_at": issued_at + ttl,
            "approvers": [{"id": "alice", "at": issued_at - 10}],
            "quorum": 1,
            "policy": {"rule": "stop-default", "hash": "sha256:" + "ab" * 32},
            "risk": "medium",
        }
    )
    envelope = approval_signer().sign_statement(statement)
    return Bundle(
        make_bundle(action.canonical_bytes(), envelope), approval_id, rid, resource_type, operation
    )


AWS_AUDIENCE: Final = "airlock-executor/test-us-east-1"
AWS_ACCOUNT: Final = "123456789012"  # moto's account
AWS_REGION: Final = "us-east-1"
AWS_BINDING: Final = Binding(AWS_AUDIENCE, "aws", AWS_ACCOUNT, AWS_REGION)


def make_aws_bundle(
    resource_id: str,
    *,
    operation: str = "stop",
    status: str = "Running",
    observed_at: str = "2025-11-29T06:00:00Z",
    issued_at: int = T0,
    approval_id: str | None = None,
) -> Bundle:
    """An approved AWS action on ``resource_id`` (``i-…`` is EC2, anything else RDS),
    signed for :data:`AWS_BINDING`."""
    rtype = "ec2.instance" if resource_id.startswith("i-") else "rds.instance"
    apv = approval_id or f"apv_{resource_id.replace('-', '')}{operation}"
    target = {"provider": "aws", "account": AWS_ACCOUNT, "region": AWS_REGION}
    action = ProposedAction.model_validate(
        {
            "type": "airlock.action/v1",
            "proposal_id": "prop_" + apv.removeprefix("apv_"),
            **target,
            "resource": {"type": rtype, "id": resource_id},
            "operation": operation,
            "params": {},
            "precondition": {
                "status": status,
                "absent_tags": ["airlock:protect"],
                "observed_at": observed_at,
            },
            "evidence": {"policy": "idle-aws/v1", "window_days": 14, "cpu_p95_bp": 340},
            "reason": "Idle 14 days",
            "proposed_by": "agent:test",
            "created_at": observed_at,
        }
    )
    statement = ApprovalStatement.model_validate(
        {
            "type": "airlock.approval/v1",
            "approval_id": apv,
            "proposal_id": action.proposal_id,
            "action_hash": action.action_hash(),
            **target,
            "resource": {"type": rtype, "id": resource_id},
            "operation": operation,
            "audience": AWS_AUDIENCE,
            "nonce": hashlib.sha256(apv.encode()).hexdigest()[:32],
            "issued_at": issued_at,
            "not_before": issued_at,
            "expires_at": issued_at + TTL,
            "approvers": [{"id": "alice", "at": issued_at - 10}],
            "quorum": 1,
            "policy": {"rule": "stop-default", "hash": "sha256:" + "ab" * 32},
            "risk": "high" if operation == "delete" else "medium",
        }
    )
    envelope = approval_signer().sign_statement(statement)
    return Bundle(
        make_bundle(action.canonical_bytes(), envelope), apv, resource_id, rtype, operation
    )


class FakeClock:
    def __init__(self, now: int = T0 + 10) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: int) -> None:
        self.now += seconds


# ---------------------------------------------------------------------------------------
# In-memory cloud double (one process).


@dataclass
class InMemoryCloud:
    """A CloudReader + CloudWriter double. ``writes`` lists every call that took effect.

    ``next_fault`` makes the next write misbehave: ``"timeout_after"`` applies the
    effect then raises UnknownOutcome (the answer was lost), ``"timeout_before"`` raises
    UnknownOutcome with no effect, ``"refuse"`` raises IncorrectState (no effect).
    """

    instances: dict[tuple[str, str], LiveState] = field(default_factory=dict)
    writes: list[tuple[str, str, str]] = field(default_factory=list)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    next_fault: str | None = None
    read_fails: bool = False

    def add(self, resource_type: str, rid: str, status: str = "Running", **tags: str) -> None:
        self.instances[(resource_type, rid)] = LiveState(
            resource_type,  # type: ignore[arg-type]
            rid,
            REGION,
            status,
            dict(tags),
            started_at=LAST_START,
        )

    def set_status(self, resource_type: str, rid: str, status: str) -> None:
        old = self.instances[(resource_type, rid)]
        self.instances[(resource_type, rid)] = replace(old, status=status)

    def tag(self, resource_type: str, rid: str, key: str, value: str = "") -> None:
        old = self.instances[(resource_type, rid)]
        self.instances[(resource_type, rid)] = replace(old, tags={**old.tags, key: value})

    def started(self, resource_type: str, rid: str, at: str) -> None:
        """Record a start at ``at`` (RFC 3339 UTC), as the provider's StartTime shows it."""
        old = self.instances[(resource_type, rid)]
        self.instances[(resource_type, rid)] = replace(old, started_at=at)

    def writes_for(self, rid: str) -> int:
        return sum(1 for _, r, _ in self.writes if r == rid)

    # CloudReader
    def list_instances(
        self, region: str, resource_type: ResourceType, *, page_size: int = 100
    ) -> Iterator[LiveState]:
        return iter([s for (t, _), s in self.instances.items() if t == resource_type])

    def get_state(
        self, region: str, resource_type: ResourceType, resource_id: str
    ) -> LiveState | None:
        if self.read_fails:
            raise UnknownOutcome("read timed out")
        return self.instances.get((resource_type, resource_id))

    def get_metrics(
        self, region: str, resource_id: str, metric: str, *, start: int, end: int, period: int
    ) -> Iterator[MetricPoint]:
        return iter(())

    # CloudWriter
    def _write(self, op: str, resource_type: str, rid: str, token: str = "") -> WriteResult:
        self.calls.append((op, rid, token))
        fault, self.next_fault = self.next_fault, None
        if token and token in self.tokens:
            return WriteResult(self.tokens[token])  # ECS: a ClientToken runs once
        if fault == "refuse":
            raise IncorrectState("refused", code="IncorrectInstanceStatus", request_id="req-r")
        if fault == "timeout_before":
            raise UnknownOutcome("timed out", code="Timeout")
        key = (resource_type, rid)
        if key not in self.instances:
            raise ResourceNotFound("no such instance", code="InvalidInstanceId.NotFound")
        if op == "delete":
            del self.instances[key]
        else:
            if self.instances[key].status != "Running":
                raise IncorrectState("not running", code="IncorrectInstanceStatus")
            self.set_status(resource_type, rid, "Stopped")
        request_id = f"req-{len(self.writes) + 1}"
        self.writes.append((op, rid, token))
        if token:
            self.tokens[token] = request_id
        if fault == "timeout_after":
            raise UnknownOutcome("timed out after sending", code="Timeout")
        return WriteResult(request_id)

    def stop_ecs(self, region: str, instance_id: str, *, stopped_mode: str) -> WriteResult:
        return self._write("stop", "ecs.instance", instance_id)

    def delete_ecs(self, region: str, instance_id: str, *, client_token: str) -> WriteResult:
        return self._write("delete", "ecs.instance", instance_id, client_token)

    def stop_rds(self, region: str, instance_id: str) -> WriteResult:
        return self._write("stop", "rds.instance", instance_id)


# ---------------------------------------------------------------------------------------
# File-backed cloud double (shared by several processes).


class FakeFileCloud:
    """A CloudReader + CloudWriter double whose state lives in a SQLite file.

    Every effective write appends a row to ``writes`` inside the same transaction as its
    effect, so the count survives any process being SIGKILLed and is the exactly-once
    judge. A ``ClientToken`` already seen returns its first request id without effect.
    """

    def __init__(self, path: Path) -> None:
        self._path = str(path)
        self._conn = sqlite3.connect(self._path, timeout=60, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS instances (
                rtype TEXT, rid TEXT, status TEXT, tags TEXT, PRIMARY KEY (rtype, rid));
            CREATE TABLE IF NOT EXISTS writes (
                seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT, rid TEXT, token TEXT,
                pid INTEGER);
            """
        )

    def add_many(self, rows: list[tuple[str, str, str]]) -> None:
        with self._tx() as cur:
            cur.executemany(
                "INSERT INTO instances VALUES (?, ?, ?, '{}')", [(t, r, s) for t, r, s in rows]
            )

    def _tx(self) -> _Tx:
        return _Tx(self._conn)

    def writes_by_resource(self) -> Mapping[str, int]:
        rows = self._conn.execute("SELECT rid, COUNT(*) FROM writes GROUP BY rid").fetchall()
        return {rid: n for rid, n in rows}

    def total_writes(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM writes").fetchone()[0])

    def list_instances(
        self, region: str, resource_type: ResourceType, *, page_size: int = 100
    ) -> Iterator[LiveState]:
        raise NotImplementedError("the executor never lists")

    def get_state(
        self, region: str, resource_type: ResourceType, resource_id: str
    ) -> LiveState | None:
        row = self._conn.execute(
            "SELECT status, tags FROM instances WHERE rtype = ? AND rid = ?",
            (resource_type, resource_id),
        ).fetchone()
        if row is None:
            return None
        return LiveState(
            resource_type, resource_id, region, row[0], json.loads(row[1]), started_at=LAST_START
        )

    def get_metrics(
        self, region: str, resource_id: str, metric: str, *, start: int, end: int, period: int
    ) -> Iterator[MetricPoint]:
        raise NotImplementedError("the executor never reads metrics")

    def _write(self, op: str, resource_type: str, rid: str, token: str = "") -> WriteResult:
        with self._tx() as cur:
            if token:
                seen = cur.execute("SELECT seq FROM writes WHERE token = ?", (token,)).fetchone()
                if seen is not None:
                    return WriteResult(f"req-{seen[0]}")
            row = cur.execute(
                "SELECT status FROM instances WHERE rtype = ? AND rid = ?", (resource_type, rid)
            ).fetchone()
            if row is None:
                raise ResourceNotFound("no such instance", code="InvalidInstanceId.NotFound")
            if op == "delete":
                cur.execute(
                    "DELETE FROM instances WHERE rtype = ? AND rid = ?", (resource_type, rid)
                )
            else:
                if row[0] != "Running":
                    raise IncorrectState("not running", code="IncorrectInstanceStatus")
                cur.execute(
                    "UPDATE instances SET status = 'Stopped' WHERE rtype = ? AND rid = ?",
                    (resource_type, rid),
                )
            cur.execute(
                "INSERT INTO writes (op, rid, token, pid) VALUES (?, ?, ?, ?)",
                (op, rid, token, os.getpid()),
            )
            seq = cur.lastrowid
        return WriteResult(f"req-{seq}")

    def stop_ecs(self, region: str, instance_id: str, *, stopped_mode: str) -> WriteResult:
        return self._write("stop", "ecs.instance", instance_id)

    def delete_ecs(self, region: str, instance_id: str, *, client_token: str) -> WriteResult:
        return self._write("delete", "ecs.instance", instance_id, client_token)

    def stop_rds(self, region: str, instance_id: str) -> WriteResult:
        return self._write("stop", "rds.instance", instance_id)


class _Tx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Cursor:
        self._cur = self._conn.cursor()
        self._cur.execute("BEGIN IMMEDIATE")
        return self._cur

    def __exit__(self, exc_type: object, *_: object) -> None:
        self._cur.execute("ROLLBACK" if exc_type is not None else "COMMIT")
        self._cur.close()


def make_executor(
    url: str,
    cloud: Any,
    clock: Any,
    *,
    worker_id: str | None = None,
    failpoints: Failpoints | None = None,
    sink: OutcomeSink | None = None,
    lease_seconds: int = LEASE,
    writer: Any = None,
    binding: Binding = BINDING,
) -> Executor:
    return Executor(
        engine=make_engine(url),
        keys=keyset(),
        binding=binding,
        reader=cloud,
        writer=cloud if writer is None else writer,
        signer=receipt_signer(),
        clock=clock,
        worker_id=worker_id,
        lease_seconds=lease_seconds,
        failpoints=failpoints,
        sink=sink,
    )


def binding_for(spec: str) -> Binding:
    """The executor binding for a :func:`cloud_for` spec: AWS's for ``moto:``."""
    return AWS_BINDING if spec.startswith("moto:") else BINDING


def cloud_for(spec: str) -> tuple[Any, Any]:
    """(reader, writer) for a child process: ``devcloud:HOST:PORT`` is the real Alibaba
    adapter against devcloud; ``moto:URL,KEY_ID,SECRET`` the real AWS adapter against a
    moto server, reading and writing with that (writer's) key; anything else is a
    FakeFileCloud file path."""
    if spec.startswith("moto:"):
        from airlock.cloud.aws import AwsConfig, AwsReader
        from airlock.cloud.aws.writer import AwsWriter

        url, key_id, secret = spec.removeprefix("moto:").split(",")
        aws = AwsConfig(key_id, secret, endpoint_url=url, read_timeout_ms=60_000)
        return AwsReader(aws), AwsWriter(aws)
    if spec.startswith("devcloud:"):
        from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader
        from airlock.cloud.alibaba.writer import AlibabaWriter
        from airlock.settings import DEVCLOUD_READ_KEY, DEVCLOUD_WRITE_KEY

        endpoint = spec.removeprefix("devcloud:")

        def config(key: tuple[str, str]) -> AlibabaConfig:
            return AlibabaConfig(
                key[0],
                key[1],
                endpoint=endpoint,
                protocol="http",
                connect_timeout_ms=2_000,
                read_timeout_ms=5_000,
            )

        return AlibabaReader(config(DEVCLOUD_READ_KEY)), AlibabaWriter(config(DEVCLOUD_WRITE_KEY))
    cloud = FakeFileCloud(Path(spec))
    return cloud, cloud


class StopAfterFailures(Backoff):
    """An error backoff for :func:`~services.executor.serve` tests: no wait, and after
    ``n`` failures a stop request, so a loop that never gets anywhere still ends."""

    def __init__(self, shutdown: Shutdown, n: int) -> None:
        super().__init__(base=0.001, cap=0.001)
        self._shutdown, self._n = shutdown, n

    def failure(self) -> float:
        super().failure()
        if self.failures >= self._n:
            self._shutdown.request()
        return 0.0


@contextmanager
def with_effect_key_column(engine: Engine) -> Iterator[None]:
    """A ledger at a revision before 0011, with the effect key column today's executor
    writes while in the block, and without it after, as that revision had none."""
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE executor_ledger ADD COLUMN effect_key VARCHAR(200)"))
    yield
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE executor_ledger DROP COLUMN effect_key"))


def leave_claimed(executor: Executor, cloud: Any, raw: bytes) -> None:
    """Consume ``raw`` into ``claimed``, its lease ended, as a live re-read that fails does:
    the one way the execute path leaves a row ``claimed`` for recovery to continue."""
    cloud.read_fails = True
    try:
        outcome = executor.execute(raw)
    finally:
        cloud.read_fails = False
    assert outcome.state is not None and outcome.state.value == "claimed", outcome
