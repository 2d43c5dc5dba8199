"""An approved gate call's overhead beside a bare call of the same function and the
ledger's own commit floor, measured in one run.

``python -m bench.bench_gate [--calls N] [--rounds R]`` (or ``make bench``). A real
checkpoint (uvicorn on a loopback port, SQLite) whose policy auto-approves the bench's
low-risk tool, so each gated call walks the whole approved path: propose, read the
proposal, verify the bundle (steps 1–12), consume it in the gate's ledger (13), re-read
the premises (14), commit ``executing``, call the function, commit the outcome with its
signed receipt, and deliver the receipt. The function is the same in both subjects: one
INSERT and commit into its own SQLite file, as a payments service would.

The checkpoint's share (three HTTP exchanges per call, answered by another server) is
timed by the gate's transport and reported apart; what remains after it and the
function's own time is the gate's overhead, given in µs and in commits of the ledger's
floor: a bare single-row INSERT and commit on a SQLite file with the ledger's settings
(WAL, ``synchronous=FULL``). Subjects alternate round by round, so noise hits all alike.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import uvicorn

from devstack.ports import free_port

AUDIENCE = "bench-gate"
_POLICY = """
version = 1

[[rule]]
name = "bench-auto"
effect = "auto"
match.tool = "bench_refund"
match.risk = "low"
"""


class _TimedTransport(httpx.BaseTransport):
    """Times every exchange, the answer's body included: the checkpoint's share."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()
        self.seconds = 0.0
        self.exchanges = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        response = self._inner.handle_request(request)
        response.read()
        self.seconds += time.perf_counter() - start
        self.exchanges += 1
        return response

    def close(self) -> None:
        self._inner.close()


def _payments(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE refunds (key TEXT PRIMARY KEY, amount INTEGER NOT NULL)")
    return conn


def _commit_floor(engine: sa.Engine, count: int) -> float:
    """Seconds per bare single-row INSERT + commit through the ledger's own engine."""
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS bench_floor (n INTEGER, v TEXT)"))
    start = time.perf_counter()
    for n in range(count):
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO bench_floor VALUES (:n, :v)"), {"n": n, "v": "x"})
    return (time.perf_counter() - start) / count


def _checkpoint(root: Path, gate_public: dict[str, Any]) -> tuple[Any, str]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from airlock.gate import ReceiptSigner
    from airlock.protocol import canonical_bytes
    from airlock.settings import CheckpointSettings
    from services.checkpoint.app import build
    from services.checkpoint.keys import KeyDirectory

    KeyDirectory(root / "keys").generate(int(time.time()))
    # The checkpoint refuses to start without the executor's receipt key set; no cloud
    # outcome is reported here, so a fresh key's public half is enough.
    executor = ReceiptSigner(Ed25519PrivateKey.generate()).key_set()
    (root / "receipt-keys.json").write_bytes(canonical_bytes(executor.to_value()))
    (root / "gate-keys.json").write_bytes(canonical_bytes({AUDIENCE: gate_public}))
    (root / "policy.toml").write_text(_POLICY)
    settings = CheckpointSettings.model_validate(
        {
            "database_url": f"sqlite:///{root / 'checkpoint.db'}",
            "keys_dir": root / "keys",
            "receipt_keys_path": root / "receipt-keys.json",
            "gate_keys": root / "gate-keys.json",
            "policy_path": root / "policy.toml",
            "audience": "airlock-executor/bench",
        }
    )
    app = build(settings, sweep_interval=None)
    token = app.state.accounts.create_service_token(f"bench-gate-{time.time_ns()}", "agent")
    return app, token


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=60, help="calls per subject per round")
    args = parser.parse_args(argv)

    from airlock.gate import Gate, GateConfig, generate_receipt_key
    from airlock.protocol import canonical_bytes
    from airlock.store import make_engine

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        signer = generate_receipt_key(root / "gate-receipt.pem")
        app, token = _checkpoint(root, signer.key_set().to_value())
        (root / "pinned.json").write_bytes(
            canonical_bytes(app.state.checkpoint.keys.public_keyset().to_value())
        )
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)  # readiness poll of the in-process server, not a race wait
        url = f"http://127.0.0.1:{port}"
        timed = _TimedTransport()
        http = httpx.Client(base_url=url, transport=timed, timeout=30.0, follow_redirects=False)
        config = GateConfig(
            checkpoint_url=url,
            token=token,
            keys=root / "pinned.json",
            audience=AUDIENCE,
            ledger_url=f"sqlite:///{root / 'gate.db'}",
            receipt_key=root / "gate-receipt.pem",
        )
        gate = Gate(config, http=http)
        floor_engine = make_engine(f"sqlite:///{root / 'floor.db'}")
        payments = _payments(root / "payments.db")
        lock = threading.Lock()

        def refund(order: str, amount: int, *, idempotency_key: str) -> str:
            with lock:
                payments.execute("INSERT INTO refunds VALUES (?, ?)", (idempotency_key, amount))
            return order

        gated: Callable[..., str] = gate.guard(
            risk="low",
            target=lambda order, amount: order,
            effect_key=lambda order, amount: f"refund:{order}",
            premises=lambda order, amount: {"refunded": 0},
            tool="bench_refund",
        )(refund)
        counter = 0

        def gated_round(n: int) -> tuple[float, float]:
            nonlocal counter
            before = timed.seconds
            start = time.perf_counter()
            for _ in range(n):
                counter += 1
                gated(f"order-g{counter}", 100)
            total = (time.perf_counter() - start) / n
            return total, (timed.seconds - before) / n

        def bare_round(n: int) -> float:
            nonlocal counter
            start = time.perf_counter()
            for _ in range(n):
                counter += 1
                refund(f"order-b{counter}", 100, idempotency_key=f"bare:{counter}")
            return (time.perf_counter() - start) / n

        try:
            gated_round(10)  # warm up: connections, compiled statements, the policy
            totals, https, bares, floors = [], [], [], []
            for _ in range(args.rounds):
                total, share = gated_round(args.calls)
                totals.append(total)
                https.append(share)
                bares.append(bare_round(args.calls))
                floors.append(_commit_floor(floor_engine, args.calls))
            exchanges = timed.exchanges / max(counter, 1)
        finally:
            gate.close()
            http.close()
            floor_engine.dispose()
            payments.close()
            server.should_exit = True
            thread.join(timeout=10)
            app.state.checkpoint.db.dispose()

    total, share = statistics.median(totals), statistics.median(https)
    bare, floor = statistics.median(bares), statistics.median(floors)
    own = total - share - bare
    print(f"gate on SQLite (WAL, synchronous=FULL), {args.rounds} rounds of {args.calls} calls")
    rows = [
        ("ledger commit floor", floor),
        ("bare call of the function", bare),
        ("gated call, whole", total),
        (f"  checkpoint HTTP (~{exchanges:.1f} exchanges)", share),
        ("  gate's own overhead", own),
    ]
    for name, seconds in rows:
        print(f"{name:<38} {seconds * 1e6:>9.0f} µs")
    print(f"ratio gate's own overhead / commit floor = {own / floor:.2f} commits")
    print(f"ratio gated / bare call = {total / bare:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
