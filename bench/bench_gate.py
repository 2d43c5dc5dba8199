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

from bench.bench_checkpoint import checkpoint_values, serve

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
    """The checkpoint app (auto-approving the bench's tool) and an agent token."""
    from airlock.protocol import canonical_bytes
    from airlock.settings import CheckpointSettings
    from services.checkpoint.app import build

    (root / "gate-keys.json").write_bytes(canonical_bytes({AUDIENCE: gate_public}))
    (root / "policy.toml").write_text(_POLICY)
    values = checkpoint_values(root, None)
    values.update(gate_keys=root / "gate-keys.json", policy_path=root / "policy.toml")
    app = build(CheckpointSettings.model_validate(values), sweep_interval=None)
    token = app.state.accounts.create_service_token(f"bench-gate-{time.time_ns()}", "agent")
    return app, token


class _Subjects:
    """The function, the same function behind a gate, and the ledger's commit floor."""

    def __init__(self, root: Path, url: str, token: str, timed: _TimedTransport) -> None:
        from airlock.gate import Gate, GateConfig
        from airlock.store import make_engine

        self.timed = timed
        self.http = httpx.Client(base_url=url, transport=timed, timeout=30.0)
        config = GateConfig(
            checkpoint_url=url,
            token=token,
            keys=root / "pinned.json",
            audience=AUDIENCE,
            ledger_url=f"sqlite:///{root / 'gate.db'}",
            receipt_key=root / "gate-receipt.pem",
        )
        self.gate = Gate(config, http=self.http)
        self.floor_engine = make_engine(f"sqlite:///{root / 'floor.db'}")
        self.payments = _payments(root / "payments.db")
        self.lock = threading.Lock()
        self.gated: Callable[..., str] = self.gate.guard(
            risk="low",
            target=lambda order, amount: order,
            effect_key=lambda order, amount: f"refund:{order}",
            premises=lambda order, amount: {"refunded": 0},
            tool="bench_refund",
        )(self.refund)
        self.counter = 0
        self.gated_calls = 0

    def refund(self, order: str, amount: int, *, idempotency_key: str) -> str:
        with self.lock:
            self.payments.execute("INSERT INTO refunds VALUES (?, ?)", (idempotency_key, amount))
        return order

    def gated_round(self, n: int) -> tuple[float, float]:
        """Seconds per gated call, and the checkpoint's HTTP share of it."""
        before = self.timed.seconds
        start = time.perf_counter()
        for _ in range(n):
            self.counter += 1
            self.gated_calls += 1
            self.gated(f"order-g{self.counter}", 100)
        return (time.perf_counter() - start) / n, (self.timed.seconds - before) / n

    def bare_round(self, n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            self.counter += 1
            self.refund(f"order-b{self.counter}", 100, idempotency_key=f"bare:{self.counter}")
        return (time.perf_counter() - start) / n

    def close(self) -> None:
        self.gate.close()
        self.http.close()
        self.floor_engine.dispose()
        self.payments.close()


def _report(rounds: int, calls: int, samples: dict[str, list[float]], exchanges: float) -> None:
    total, share = statistics.median(samples["total"]), statistics.median(samples["http"])
    bare, floor = statistics.median(samples["bare"]), statistics.median(samples["floor"])
    own = total - share - bare
    print(f"gate on SQLite (WAL, synchronous=FULL), {rounds} rounds of {calls} calls")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=60, help="calls per subject per round")
    args = parser.parse_args(argv)

    from airlock.gate import generate_receipt_key
    from airlock.protocol import canonical_bytes

    samples: dict[str, list[float]] = {"total": [], "http": [], "bare": [], "floor": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        signer = generate_receipt_key(root / "gate-receipt.pem")
        app, token = _checkpoint(root, signer.key_set().to_value())
        (root / "pinned.json").write_bytes(
            canonical_bytes(app.state.checkpoint.keys.public_keyset().to_value())
        )
        server, thread, url = serve(app)
        timed = _TimedTransport()
        subjects = _Subjects(root, url, token, timed)
        try:
            subjects.gated_round(10)  # warm up: connections, compiled statements, the policy
            for _ in range(args.rounds):
                total, share = subjects.gated_round(args.calls)
                samples["total"].append(total)
                samples["http"].append(share)
                samples["bare"].append(subjects.bare_round(args.calls))
                samples["floor"].append(_commit_floor(subjects.floor_engine, args.calls))
            exchanges = timed.exchanges / max(subjects.gated_calls, 1)
        finally:
            subjects.close()
            server.should_exit = True
            thread.join(timeout=10)
            app.state.checkpoint.db.dispose()
    _report(args.rounds, args.calls, samples, exchanges)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
