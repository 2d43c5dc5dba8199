"""Approvals issued per second through HTTP, beside bare Ed25519 sign, in the same run.

``python -m bench.bench_checkpoint [--database-url URL]`` (or ``make bench``). A real
uvicorn server on a loopback port serves the checkpoint on SQLite (default) or the given
PostgreSQL database; each measured call is one ``POST /v1/proposals/{id}/approve`` of a
quorum-1 stop, which locks the proposal, records the vote, builds and signs the
statement, writes the approval, the feed entry and two audit events in one transaction,
and answers with the record. Proposals are submitted between rounds, unmeasured. Bare
Ed25519 sign is measured over a statement-sized PAE message, round by round alternated
with the HTTP rounds, and so is the floor issue 25 names: a bare FastAPI POST on the same
kind of server that does one durable commit (a row inserted through ``make_engine``, the
same database kind and settings) and one signature of that message. Goal: HTTP approvals
≥ 0.5 × that floor.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from bench._harness import ops_per_second
from devstack.ports import free_port

ACCOUNT = "5123456789012345"
#: HTTP approvals per second ÷ bare POSTs (one commit, one signature) per second.
GOAL = 0.5


def _action(n: int, run: str) -> bytes:
    return json.dumps(
        {
            "type": "airlock.action/v1",
            "proposal_id": f"prop_bench{run}{n:08d}",
            "provider": "alibaba",
            "account": ACCOUNT,
            "region": "ap-southeast-1",
            "resource": {"type": "ecs.instance", "id": f"i-bench{run}{n:08d}"},
            "operation": "stop",
            "params": {"stopped_mode": "StopCharging"},
            "precondition": {
                "status": "Running",
                "absent_tags": ["airlock:protect"],
                "observed_at": "2026-11-29T06:00:00Z",
            },
            "evidence": {
                "policy": "idle/v1",
                "window_days": 14,
                "cpu_p95_bp": 340,
                "cpu_p95_daily_bp": [300 + d for d in range(14)],
                "net_bytes_daily": [2_100_000 + d for d in range(14)],
                "tags": {"owner": "bench", "env": "dev"},
            },
            "reason": "Idle 14 days: CPU p95 3.40% < 10.00%, network 2.1 MB/day",
            "proposed_by": "agent:bench",
            "created_at": "2026-11-29T06:00:05Z",
        }
    ).encode()


def checkpoint_values(root: Path, database_url: str | None) -> dict[str, Any]:
    """Checkpoint settings over a fresh signing key in ``root``: SQLite there unless
    ``database_url`` names another database."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from airlock.protocol import KeySet, canonical_bytes
    from services.checkpoint.keys import KeyDirectory
    from services.executor import ReceiptSigner

    KeyDirectory(root / "keys").generate(int(time.time()))
    # The checkpoint refuses to start without the executor's receipt key set; a bench
    # receives no outcomes, so a fresh key's public half is enough.
    receipt_keys = root / "receipt-keys.json"
    receipt_keys.write_bytes(
        canonical_bytes(
            KeySet([ReceiptSigner(Ed25519PrivateKey.generate()).trusted_key()]).to_value()
        )
    )
    return {
        "database_url": database_url or f"sqlite:///{root / 'checkpoint.db'}",
        "keys_dir": root / "keys",
        "receipt_keys_path": receipt_keys,
        "audience": "airlock-executor/bench",
    }


def serve(app: Any) -> tuple[uvicorn.Server, threading.Thread, str]:
    """``app`` served by uvicorn on a free loopback port in a daemon thread, started;
    the server, its thread and its base URL. Stop it with ``server.should_exit = True``."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)  # readiness poll of the in-process server, not a race wait
    return server, thread, f"http://127.0.0.1:{port}"


def bare_app(database_url: str, sign: Any) -> tuple[Any, Any]:
    """The floor: a FastAPI app whose ``POST /bare`` commits one row and signs once; the
    app and its engine (dispose it after)."""
    import sqlalchemy as sa
    from fastapi import FastAPI

    from airlock.store import make_engine

    engine = make_engine(database_url)
    table = sa.Table(
        "bench_bare_commit",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("body", sa.Text, nullable=False),
    )
    table.create(engine, checkfirst=True)
    app = FastAPI()

    @app.post("/bare")
    def bare(body: dict[str, Any]) -> dict[str, str]:
        with engine.begin() as conn:
            conn.execute(table.insert().values(body=json.dumps(body)))
        return {"signature": sign().hex()}

    return app, engine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=150, help="approvals per HTTP round")
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    args = parser.parse_args(argv)

    from airlock.protocol import APPROVAL_PAYLOAD_TYPE, pae
    from airlock.settings import CheckpointSettings
    from services.checkpoint.app import build

    with tempfile.TemporaryDirectory() as tmp:
        values = checkpoint_values(Path(tmp), args.database_url)
        app = build(CheckpointSettings.model_validate(values), sweep_interval=None)
        accounts = app.state.accounts
        accounts.add_user("alice", "bench password 1234", "approver")
        agent_token = accounts.create_service_token(f"bench-{int(time.time())}", "agent")
        user_token = accounts.login("alice", "bench password 1234")[0]
        signer = app.state.checkpoint.keys.signer()

        payload = json.dumps({"x": "s" * 900}).encode()  # a statement is ~1 KiB JCS
        message = pae(APPROVAL_PAYLOAD_TYPE, payload)
        key = signer._key  # the bench measures the very key the checkpoint signs with
        floor_url = args.database_url or f"sqlite:///{Path(tmp) / 'bare.db'}"
        floor_app, floor_engine = bare_app(floor_url, lambda: key.sign(message))
        floor_server, floor_thread, floor_base = serve(floor_app)
        server, thread, base = serve(app)
        try:
            run = format(int(time.time()) % 100000, "05d")
            agent = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {agent_token}"})
            person = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {user_token}"})
            counter = 0

            def submit_batch(size: int) -> list[tuple[str, str]]:
                nonlocal counter
                pending: list[tuple[str, str]] = []
                for _ in range(size):
                    body = agent.post(
                        "/v1/proposals",
                        content=_action(counter, run),
                        headers={"Content-Type": "application/json"},
                    ).json()
                    counter += 1
                    pending.append((body["id"], body["action_hash"]))
                return pending

            def approve_batch(pending: list[tuple[str, str]]) -> float:
                start = time.perf_counter()
                for proposal_id, digest in pending:
                    response = person.post(
                        f"/v1/proposals/{proposal_id}/approve", json={"action_hash": digest}
                    )
                    body: dict[str, Any] = response.json()
                    if body.get("state") != "approved" or body["approval"] is None:
                        raise RuntimeError(f"approve failed: {response.text[:200]}")
                return len(pending) / (time.perf_counter() - start)

            floor = httpx.Client(base_url=floor_base)

            def bare_batch(size: int) -> float:
                start = time.perf_counter()
                for n in range(size):
                    response = floor.post("/bare", json={"n": n, "x": "s" * 900})
                    if response.status_code != 200:
                        raise RuntimeError(f"bare POST failed: {response.text[:200]}")
                return size / (time.perf_counter() - start)

            approve_batch(submit_batch(20))  # warm up connections and caches
            bare_batch(20)
            http_rates: list[float] = []
            bare_rates: list[float] = []
            sign_rates: list[float] = []
            for _ in range(args.rounds):
                http_rates.append(approve_batch(submit_batch(args.batch)))
                bare_rates.append(bare_batch(args.batch))
                sign_rates.append(ops_per_second(lambda: key.sign(message), seconds=0.25))
            agent.close()
            person.close()
            floor.close()
        finally:
            for running, worker in ((server, thread), (floor_server, floor_thread)):
                running.should_exit = True
                worker.join(timeout=10)
            app.state.checkpoint.db.dispose()
            floor_engine.dispose()

    http = statistics.median(http_rates)
    bare = statistics.median(bare_rates)
    sign = statistics.median(sign_rates)
    backend = "PostgreSQL" if args.database_url else "SQLite (WAL, synchronous=FULL)"
    print(f"checkpoint on {backend}, {args.rounds} rounds of {args.batch} approvals")
    print(f"{'bare Ed25519 sign':<32} {sign:>10,.0f} /s   {1e6 / sign:8.1f} µs each")
    print(f"{'approve → signed envelope (HTTP)':<32} {http:>10,.0f} /s   {1e6 / http:8.1f} µs each")
    print(f"{'bare POST: one commit, one sign':<32} {bare:>10,.0f} /s   {1e6 / bare:8.1f} µs each")
    print(f"ratio HTTP approvals / bare sign = {http / sign:.4f}")
    met = http / bare >= GOAL
    verdict = "meets" if met else "BELOW"
    print(f"ratio HTTP approvals / bare POST = {http / bare:.3f} ({verdict} goal >= {GOAL})")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
