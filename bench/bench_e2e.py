"""The whole path on loopback, beside its bare primitives measured in the same run.

``python -m bench.bench_e2e [--db sqlite|postgres|both] [--n N] [--burst M] [--clients K]
[--pg URL] [--parallel P] [--slow-cloud-ms L]``
(or ``make bench``). devcloud, the checkpoint and the ``airlock executor`` daemon on the
checkpoint's feed run as real processes on 127.0.0.1 (devstack.stack), with the
executor's ledger on SQLite or PostgreSQL (the checkpoint on SQLite). For each approval:
the agent submits a proposal over HTTP, alice approves it over HTTP, the executor takes
it from the long-poll feed, verifies, consumes, re-reads and writes at devcloud.

* **approval → write latency** (``--n`` approvals, one at a time): from the moment the
  approve call's HTTP response arrived to the write's timestamp in devcloud's write log.
  Both clocks are ``time.time()`` on this host. The write can land before the response
  reaches the client (the approval is committed and the feed woken before the answer is
  sent), so the figure from the request's send time is printed too. Between approvals
  the benchmark waits until the executor has delivered the outcome, so each sample
  starts with an idle executor.
* **sustained executions/s** (``--burst`` approvals): proposals are submitted first,
  then approved by ``--clients`` people's clients at once, each its share back to back
  (one client alone is bound by its own round trips); executions/s is ``burst`` over the
  time from the first approve sent to the last write in the log.
* **CPU per approval** (Linux): the CPU each process used from the burst's first approve
  until its last outcome was delivered, over the burst's size: the checkpoint, the
  executor, devcloud, this benchmark (the people's clients) and PostgreSQL with the ledger
  on it. On loopback they share the machine's cores, so their sum bounds executions/s.
* **with a slow cloud** (``--slow-cloud-ms``): the burst again, with every devcloud call
  that much slower, as a cloud API far away is: what the executor's side-by-side
  execution (``AIRLOCK_EXECUTOR_PARALLEL``) is for.
* **diagnosis** (``n/2`` more approvals, one at a time): a second long-poll reader of the
  feed (the executor's token; reading the feed moves no cursor) records when each
  approval reaches it, separating the checkpoint's wake-up from the executor's own work.
* **bare primitives**, in the same run: Ed25519 sign + verify (one statement-sized
  message), one durable single-row INSERT (its own transaction) on the same kind of
  database through the same engine settings, and one devcloud write (``StopInstance``
  through the real SDK adapter with the executor's key).
* **the path's floors**, in the same run, with nothing of Airlock's own: one at a time, a
  live re-read, a durable INSERT and the write through the SDK in a row (what an
  execution waits on before its write: the latency's floor); and ``--clients`` threads
  side by side, each item that and a durable UPDATE of its row (an execution's two
  commits: the burst's floor). Latency and sustained rate are printed as ratios to them.

Waiting for a write reads devcloud's SQLite file read-only rather than calling its admin
API, so the poll does not compete with the write it waits for. Goals (issue 25): approval
→ write p50 ≤ 6 ms on SQLite, ≤ 9 ms on PostgreSQL, p99 ≤ 20 ms; ≥ 100 executions/s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from psycopg import sql
from sqlalchemy.engine import Engine, make_url

from airlock.store import make_engine, read_transaction
from devstack.stack import ACCOUNT, PASSWORD, REGION, Stack, running_stack
from services.executor.models import deliveries

#: Approval -> write p50 by executor ledger, p99, and sustained executions/s (issue 25).
GOAL_P50_MS = {"sqlite": 6.0, "postgres": 9.0}
GOAL_P99_MS = 20.0
GOAL_PER_S = 100.0
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
_WAIT_S = 30.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _action(rid: str, pid: str) -> dict[str, Any]:
    return {
        "type": "airlock.action/v1",
        "proposal_id": pid,
        "provider": "alibaba",
        "account": ACCOUNT,
        "region": REGION,
        "resource": {"type": "ecs.instance", "id": rid},
        "operation": "stop",
        "params": {"stopped_mode": "StopCharging"},
        "precondition": {
            "status": "Running",
            "absent_tags": ["airlock:protect"],
            "observed_at": "2026-11-29T06:00:00Z",
        },
        "evidence": {"policy": "idle/v1", "window_days": 14, "cpu_p95_bp": 340},
        "reason": "Idle 14 days (benchmark)",
        "proposed_by": "agent:scanner-1",
        "created_at": "2026-11-29T06:00:05Z",
    }


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def _until(what: str, probe: Callable[[], Any], every_s: float = 0.001) -> Any:
    deadline = time.monotonic() + _WAIT_S
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(every_s)  # polling a local read-only query; the figure comes from the log


class _Person:
    """A person's client that approves over one kept-alive connection.

    http.client rather than httpx: the load generator shares the machine's two cores with
    the processes measured, and this costs it about a third of httpx's CPU per call.
    """

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        url = httpx.URL(base_url)
        self.conn = http.client.HTTPConnection(url.host, url.port, timeout=30.0)
        self.headers = {**headers, "Content-Type": "application/json"}

    def approve(self, proposal: dict[str, Any]) -> tuple[float, float, str]:
        """(sent, answered) as time.time(), and the approval id."""
        body = json.dumps({"action_hash": proposal["action_hash"]})
        sent = time.time()
        self.conn.request(
            "POST", f"/v1/proposals/{proposal['id']}/approve", body=body, headers=self.headers
        )
        response = self.conn.getresponse()
        answer = response.read()
        answered = time.time()
        if response.status != 200:
            raise RuntimeError(f"approve answered {response.status}: {answer[:200]!r}")
        return sent, answered, str(json.loads(answer)["approval"]["approval_id"])

    def close(self) -> None:
        self.conn.close()


class _Bench:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        r = httpx.post(
            f"{stack.checkpoint_url}/v1/sessions",
            json={"username": "alice", "password": PASSWORD},
            timeout=30.0,
            trust_env=False,
        )
        r.raise_for_status()
        self.alice = {"Authorization": f"Bearer {r.json()['token']}"}
        self.log = sqlite3.connect(f"file:{stack.devcloud.db_path}?mode=ro", uri=True)
        self.ledger: Engine = make_engine(stack.ledger_url, create=False)
        self.run = uuid.uuid4().hex[:6]
        self.n = 0

    def close(self) -> None:
        self.log.close()
        self.ledger.dispose()

    def propose(self) -> dict[str, Any]:
        self.n += 1
        rid = f"i-e2e{self.run}{self.n:06d}"
        self.stack.devcloud.admin.create_instance(rid, status="Running")
        return self.stack.submit(_action(rid, f"prop_e2e{self.run}{self.n:06d}"))

    def person(self) -> _Person:
        """A client of alice's own, for one thread and one phase (uvicorn closes a
        connection idle for 5 s)."""
        return _Person(self.stack.checkpoint_url, self.alice)

    def write_at(self, rid: str) -> float | None:
        row = self.log.execute(
            "SELECT at FROM write_log WHERE resource_id = ? ORDER BY seq LIMIT 1", (rid,)
        ).fetchone()
        return None if row is None else float(row[0])

    def last_write_at(self, rids: list[str]) -> float | None:
        """When the last of ``rids`` was first written; None while one is not."""
        firsts = self.log.execute(
            "SELECT count(DISTINCT resource_id), max(first) FROM (SELECT resource_id, "
            "min(at) AS first FROM write_log WHERE resource_id IN "
            f"({', '.join('?' * len(rids))}) GROUP BY resource_id)",
            rids,
        ).fetchone()
        return float(firsts[1]) if firsts[0] == len(rids) else None

    def all_delivered(self, approval_ids: list[str]) -> bool:
        with read_transaction(self.ledger) as conn:
            delivered = conn.execute(
                sa.select(sa.func.count(sa.distinct(deliveries.c.approval_id))).where(
                    deliveries.c.approval_id.in_(approval_ids)
                )
            ).scalar_one()
        return bool(delivered == len(approval_ids))

    def delivered(self, approval_id: str) -> bool:
        with read_transaction(self.ledger) as conn:
            return (
                conn.execute(
                    sa.select(deliveries.c.id).where(deliveries.c.approval_id == approval_id)
                ).first()
                is not None
            )


class _FeedWatcher(threading.Thread):
    """A second reader of the checkpoint's long-poll feed (the executor's token; the feed
    is read-only, the executor's cursor lives in its own database): when each approval
    reaches a long-poll reader, to separate the checkpoint's wake-up from the executor's
    own work."""

    def __init__(self, base_url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30.0,
            trust_env=False,
        )
        #: time.time() of every page that moved this reader's cursor. A page may hold
        #: no item for an approval the executor already executed (the feed lists only
        #: approvals still open), so the cursor's move is what is timed.
        self.advances: list[float] = []
        self.stop = threading.Event()
        self.cursor = 0
        while True:  # skip what is already on the feed
            page = self.http.get("/v1/feed", params={"after": self.cursor, "limit": 500}).json()
            if not page["items"]:
                break
            self.cursor = int(page["cursor"])

    def moved_since(self, mark: int) -> bool:
        return len(self.advances) > mark

    def run(self) -> None:
        while not self.stop.is_set():
            page = self.http.get(
                "/v1/feed", params={"after": self.cursor, "wait": 2, "limit": 100}
            ).json()
            now = time.time()
            if int(page["cursor"]) > self.cursor:
                self.advances.append(now)
            self.cursor = int(page["cursor"])
        self.http.close()


@dataclass
class Figures:
    db: str
    from_answer_ms: list[float]
    from_send_ms: list[float]
    approve_ms: list[float]
    burst: int
    clients: int
    burst_s: float
    issue_s: float
    sign_verify_us: float
    insert_ms: float
    devcloud_write_ms: float
    floor_ms: float
    floor_per_s: float
    wake_ms: list[float]
    after_wake_ms: list[float]
    #: With ``--slow-cloud-ms``: that latency, and the seconds its burst took.
    slow_cloud_ms: int = 0
    slow_burst_s: float = 0.0
    #: CPU ms per approval of the burst, by process (empty without /proc).
    cpu_ms: dict[str, float] = field(default_factory=dict)

    def render(self) -> str:
        p50 = statistics.median(self.from_answer_ms)
        p99 = _pct(self.from_answer_ms, 99)
        goal = GOAL_P50_MS[self.db]
        verdict = "MET" if p50 <= goal and p99 <= GOAL_P99_MS else "MISSED"
        rate = self.burst / self.burst_s
        lines = [
            f"-- executor ledger on {self.db}"
            f" ({len(self.from_answer_ms)} approvals, one at a time)",
            f"approval -> write, from the approve response: p50 {p50:.1f} ms,"
            f" p99 {p99:.1f} ms, min {min(self.from_answer_ms):.1f} ms"
            f" (goal p50 <= {goal:.0f} ms, p99 <= {GOAL_P99_MS:.0f} ms: {verdict})",
            f"approval -> write, from the approve request: p50"
            f" {statistics.median(self.from_send_ms):.1f} ms,"
            f" p99 {_pct(self.from_send_ms, 99):.1f} ms",
            f"approve call itself (HTTP round trip, quorum 1, signs):"
            f" p50 {statistics.median(self.approve_ms):.1f} ms",
            f"sustained: {self.burst} approvals issued by {self.clients} clients in"
            f" {self.issue_s:.2f} s ({self.burst / self.issue_s:.1f}/s); all written in"
            f" {self.burst_s:.2f} s -> {rate:.1f} executions/s"
            f" (goal >= {GOAL_PER_S:.0f}/s: {'MET' if rate >= GOAL_PER_S else 'MISSED'})",
            f"the burst's floor ({self.clients} threads, each a re-read, a durable INSERT, a write"
            f" and a durable UPDATE): {self.floor_per_s:.1f}/s; sustained ="
            f" {rate / self.floor_per_s:.2f} x that floor",
            f"bare Ed25519 sign+verify: {self.sign_verify_us:.0f} us;"
            f" bare durable single-row INSERT on {self.db}: {self.insert_ms:.2f} ms;"
            f" bare devcloud write (StopInstance via the SDK): {self.devcloud_write_ms:.2f} ms",
            f"diagnosis ({len(self.wake_ms)} more approvals with a second long-poll reader):"
            f" approve response -> feed page at that reader p50"
            f" {statistics.median(self.wake_ms):.1f} ms, p99 {_pct(self.wake_ms, 99):.1f} ms,"
            f" max {max(self.wake_ms):.1f} ms; approve response -> write p50"
            f" {statistics.median(self.after_wake_ms):.1f} ms",
            f"ratio: approval->write p50 = {p50 / self.devcloud_write_ms:.1f} x bare devcloud"
            f" write, = {p50 / self.insert_ms:.1f} x bare durable insert,"
            f" = {p50 / self.floor_ms:.2f} x the path's floor ({self.floor_ms:.2f} ms:"
            " a re-read, a durable INSERT and a write through the SDK, in a row)",
        ]
        if self.cpu_ms:
            total = sum(self.cpu_ms.values())
            cores = os.cpu_count() or 1
            split = ", ".join(
                f"{k} {v:.1f}" for k, v in sorted(self.cpu_ms.items(), key=lambda kv: -kv[1])
            )
            lines.append(
                f"CPU per approval in the burst: {split}; total {total:.1f} ms"
                f" -> at most {cores * 1000 / total:.0f}/s on {cores} cores"
            )
        if self.slow_cloud_ms:
            lines.append(
                f"sustained with every cloud call {self.slow_cloud_ms} ms slower: all written in"
                f" {self.slow_burst_s:.2f} s -> {self.burst / self.slow_burst_s:.1f} executions/s"
            )
        return "\n".join(lines)


def _latency(
    bench: _Bench, n: int, watcher: _FeedWatcher | None = None
) -> tuple[list[float], list[float], list[float]]:
    """(approve answer -> write, approve sent -> write, approve round trip); with a
    watcher, the first list is approve answer -> the watcher's feed page instead."""
    answer, send, approve = [], [], []
    person = bench.person()
    for _ in range(n):
        proposal = bench.propose()
        rid = proposal["action"]["resource"]["id"]
        # One approval at a time and nothing else on the feed: the reader's next cursor
        # move is this approval's.
        mark = len(watcher.advances) if watcher is not None else 0
        sent, answered, approval_id = person.approve(proposal)
        at = _until(f"the write of {rid}", partial(bench.write_at, rid))
        # Each sample starts with an idle executor: wait for its outcome delivery too.
        _until(f"the delivery of {approval_id}", partial(bench.delivered, approval_id))
        if watcher is not None:
            _until(f"{approval_id} on the feed", partial(watcher.moved_since, mark))
            seen = watcher.advances[mark]
            answer.append((seen - answered) * 1000)
            send.append((at - answered) * 1000)
        else:
            answer.append((at - answered) * 1000)
            send.append((at - sent) * 1000)
        approve.append((answered - sent) * 1000)
    person.close()
    return answer, send, approve


def _cpu_s(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used; 0.0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def _cpu(bench: _Bench) -> dict[str, float]:
    """CPU seconds used so far by each process of the run: the checkpoint, the executor,
    devcloud, this benchmark and, with the ledger on it, each PostgreSQL backend serving
    the ledger's database (``postgres PID``).
    Linux's /proc; empty elsewhere."""
    if not Path("/proc/self/stat").exists():
        return {}
    stack = bench.stack
    used = {
        "checkpoint": _cpu_s(stack.checkpoint.pid),
        "executor": _cpu_s(stack.executor.pid),
        "devcloud": _cpu_s(stack.devcloud.pid),
        "this bench": sum(os.times()[:2]),
    }
    if bench.ledger.dialect.name == "postgresql":
        with read_transaction(bench.ledger) as conn:
            pids = conn.execute(
                sa.text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
            ).scalars()
            used.update({f"postgres {pid}": _cpu_s(pid) for pid in pids})
    return used


def _cpu_ms_per(before: dict[str, float], after: dict[str, float], m: int) -> dict[str, float]:
    """CPU ms per approval by process from two :func:`_cpu` readings, the ledger's
    PostgreSQL backends summed as ``postgres`` (one started between them counts whole)."""
    per: dict[str, float] = {}
    for name, used in after.items():
        total = name.split(" ")[0] if name.startswith("postgres ") else name
        per[total] = per.get(total, 0.0) + (used - before.get(name, 0.0)) * 1000 / m
    return per


def _burst(bench: _Bench, m: int, clients: int) -> tuple[float, float, dict[str, float]]:
    """(first approve sent -> last write, seconds to issue them all, CPU ms per approval
    by process): ``m`` approvals issued by ``clients`` people's clients at once, each its
    share back to back. CPU counts from the first approve until every outcome is
    delivered, so each approval's whole work is in it."""
    proposals = [bench.propose() for _ in range(m)]
    shares = [proposals[i::clients] for i in range(clients)]
    start = threading.Barrier(clients + 1)
    failed: list[BaseException] = []
    approval_ids: list[str] = []

    def issue(share: list[dict[str, Any]]) -> None:
        person = bench.person()
        start.wait()
        try:
            for proposal in share:
                approval_ids.append(person.approve(proposal)[2])
        except BaseException as exc:  # reported after the join
            failed.append(exc)
        finally:
            person.close()

    threads = [threading.Thread(target=issue, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    before = _cpu(bench)
    start.wait()
    first = time.time()
    for thread in threads:
        thread.join()
    issued = time.time() - first
    if failed:
        raise failed[0]
    # The times come from devcloud's log, so the wait polls seldom: a poll every
    # millisecond took a core's tenth from the processes measured.
    rids = [p["action"]["resource"]["id"] for p in proposals]
    last = _until(f"the writes of {len(rids)}", partial(bench.last_write_at, rids), every_s=0.05)
    _until(
        f"the deliveries of {m} outcomes",
        partial(bench.all_delivered, approval_ids),
        every_s=0.05,
    )
    after = _cpu(bench)
    return last - first, issued, _cpu_ms_per(before, after, m)


def _sign_verify_us() -> float:
    key = Ed25519PrivateKey.generate()
    public = key.public_key()
    message = b"x" * 900  # about a PAE'd approval statement
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            public.verify(key.sign(message), message)
        rounds.append((time.perf_counter() - t0) / 200 * 1e6)
    return statistics.median(rounds)


def _bare_table(prefix: str) -> sa.Table:
    """A table of its own for the bare primitives: a key and a value, named afresh."""
    return sa.Table(
        f"{prefix}_{uuid.uuid4().hex[:8]}",
        sa.MetaData(),
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("v", sa.Text, nullable=False),
    )


def _insert_ms(url: str) -> float:
    """One durable single-row INSERT, its own transaction, as the ledger's engine does it."""
    engine = make_engine(url)
    table = _bare_table("bench_bare")
    try:
        table.create(engine)
        samples = []
        for _ in range(200):
            t0 = time.perf_counter()
            with engine.begin() as conn:
                conn.execute(table.insert().values(id=uuid.uuid4().hex, v="x" * 200))
            samples.append((time.perf_counter() - t0) * 1000)
        table.drop(engine)
        return statistics.median(samples)
    finally:
        engine.dispose()


def _devcloud_write_ms(stack: Stack, n: int = 100) -> float:
    writer = stack.devcloud.writer()
    ids = [f"i-bare{uuid.uuid4().hex[:10]}" for _ in range(n)]
    for rid in ids:
        stack.devcloud.admin.create_instance(rid, status="Running")
    samples = []
    for rid in ids:
        t0 = time.perf_counter()
        writer.stop_ecs(stack.devcloud.region, rid, stopped_mode="StopCharging")
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


@contextmanager
def _floor_rig(stack: Stack, url: str, n: int) -> Iterator[tuple[list[str], Callable[..., None]]]:
    """``n`` running instances at devcloud, and a step that does to one of them what an
    execution must wait on, with nothing of Airlock's own: the live re-read
    (DescribeInstances through the SDK), a durable single-row INSERT on the ledger's kind
    of database, the write (StopInstance through the SDK) and, with ``second``, a durable
    UPDATE of that row (an execution's second commit)."""
    engine = make_engine(url)
    table = _bare_table("bench_floor")
    ids = [f"i-floor{uuid.uuid4().hex[:10]}" for _ in range(n)]
    for rid in ids:
        stack.devcloud.admin.create_instance(rid, status="Running")
    region = stack.devcloud.region

    def step(reader: Any, writer: Any, rid: str, *, second: bool) -> None:
        if reader.get_state(region, "ecs.instance", rid) is None:
            raise RuntimeError(f"floor: {rid} not found at devcloud")
        with engine.begin() as conn:
            conn.execute(table.insert().values(id=rid, v="x" * 200))
        writer.stop_ecs(region, rid, stopped_mode="StopCharging")
        if second:
            with engine.begin() as conn:
                conn.execute(table.update().where(table.c.id == rid).values(v="y" * 200))

    try:
        table.create(engine)
        yield ids, step
        table.drop(engine)
    finally:
        engine.dispose()


def _floor_ms(stack: Stack, url: str, n: int = 100) -> float:
    """The approval -> write path's floor, one item at a time (a re-read, a durable
    INSERT, the write): what an execution must wait on before its write. Median ms."""
    reader, writer = stack.devcloud.reader(), stack.devcloud.writer()
    samples = []
    with _floor_rig(stack, url, n) as (ids, step):
        for rid in ids:
            t0 = time.perf_counter()
            step(reader, writer, rid, second=False)
            samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def _floor_per_s(stack: Stack, url: str, threads: int = 4, n: int = 400) -> float:
    """The burst's floor: ``threads`` side by side, each item a re-read, a durable INSERT,
    the write and a durable UPDATE (an execution's two commits). Items per second."""
    failures: list[BaseException] = []
    with _floor_rig(stack, url, n) as (ids, step):

        def work(mine: list[str]) -> None:
            reader, writer = stack.devcloud.reader(), stack.devcloud.writer()
            try:
                for rid in mine:
                    step(reader, writer, rid, second=True)
            except BaseException as exc:  # reported by the caller, below
                failures.append(exc)

        workers = [threading.Thread(target=work, args=(ids[i::threads],)) for i in range(threads)]
        t0 = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - t0
    if failures:
        raise RuntimeError(f"the burst's floor failed: {failures[0]!r}")
    return n / elapsed


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def _pg_database(admin_url: str) -> Iterator[str]:
    name = f"airlock_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(admin_url), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(_libpq(admin_url), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def _slow_burst(bench: _Bench, m: int, clients: int, latency_ms: int) -> float:
    """Seconds for a burst of ``m`` with every devcloud call ``latency_ms`` slower (a
    cloud API far away, as a real one is): what executing side by side is for."""
    bench.stack.devcloud.admin.set_faults(latency_ms=latency_ms)
    try:
        return _burst(bench, m, clients)[0]
    finally:
        bench.stack.devcloud.admin.reset_faults()


def run(
    db: str,
    *,
    n: int,
    burst: int,
    clients: int,
    pg_url: str,
    workdir: Path,
    slow_cloud_ms: int = 0,
    parallel: int | None = None,
) -> Figures:
    @contextmanager
    def ledger() -> Iterator[str | None]:
        if db == "postgres":
            with _pg_database(pg_url) as url:
                yield url
        else:
            yield None

    with (
        ledger() as ledger_url,
        running_stack(
            workdir / db,
            webapp=False,
            ledger_url=ledger_url,
            executor_env=None if parallel is None else {"AIRLOCK_EXECUTOR_PARALLEL": str(parallel)},
        ) as stack,
    ):
        bench = _Bench(stack)
        try:
            _latency(bench, 5)  # warm up: imports, connections, SQLite pages
            answer, send, approve = _latency(bench, n)
            burst_s, issue_s, cpu_ms = _burst(bench, burst, clients)
            slow_s = _slow_burst(bench, burst, clients, slow_cloud_ms) if slow_cloud_ms else 0.0
            watcher = _FeedWatcher(stack.checkpoint_url, stack.tokens["executor"])
            watcher.start()
            try:
                wake, after_wake, _ = _latency(bench, max(20, n // 2), watcher)
            finally:
                watcher.stop.set()
            insert_url = stack.ledger_url if db == "postgres" else f"sqlite:///{workdir}/bare.db"
            return Figures(
                db=db,
                from_answer_ms=answer,
                from_send_ms=send,
                approve_ms=approve,
                burst=burst,
                clients=clients,
                burst_s=burst_s,
                issue_s=issue_s,
                sign_verify_us=_sign_verify_us(),
                insert_ms=_insert_ms(insert_url),
                devcloud_write_ms=_devcloud_write_ms(stack),
                floor_ms=_floor_ms(stack, insert_url, n=min(100, max(10, n))),
                floor_per_s=_floor_per_s(
                    stack, insert_url, threads=clients, n=min(400, max(8 * clients, burst))
                ),
                wake_ms=wake,
                after_wake_ms=after_wake,
                slow_cloud_ms=slow_cloud_ms,
                slow_burst_s=slow_s,
                cpu_ms=cpu_ms,
            )
        finally:
            bench.close()


def _pg_reachable(url: str) -> bool:
    try:
        with psycopg.connect(_libpq(url), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--n", type=int, default=200, help="approvals timed one at a time")
    parser.add_argument("--burst", type=int, default=200, help="approvals for executions/s")
    parser.add_argument("--clients", type=int, default=4, help="people approving the burst at once")
    parser.add_argument("--pg", default=DEFAULT_PG_URL, help="PostgreSQL server (admin URL)")
    parser.add_argument(
        "--parallel",
        type=int,
        default=None,
        help="the executor's AIRLOCK_EXECUTOR_PARALLEL (default: its own default)",
    )
    parser.add_argument(
        "--slow-cloud-ms",
        type=int,
        default=0,
        help="also time a burst with every devcloud call this much slower",
    )
    args = parser.parse_args(argv)
    dbs = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    status = 0
    with tempfile.TemporaryDirectory(prefix="airlock-bench-e2e-") as tmp:
        for db in dbs:
            if db == "postgres" and not _pg_reachable(args.pg):
                print(f"-- executor ledger on postgres: SKIPPED, no server at {args.pg}")
                status = 1 if args.db == "postgres" else status
                continue
            figures = run(
                db,
                n=args.n,
                burst=args.burst,
                clients=args.clients,
                pg_url=args.pg,
                workdir=Path(tmp),
                slow_cloud_ms=args.slow_cloud_ms,
                parallel=args.parallel,
            )
            print(figures.render(), flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
