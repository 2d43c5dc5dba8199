"""Instructions per receipt delivered, one a request or in batches: CPU no neighbour moves.

``python -m bench.receipts_instructions --side checkpoint|courier --batch N [--small 20]
[--large 120]`` counts, under valgrind's cachegrind, the instructions per receipt of

* ``checkpoint``: the checkpoint's ASGI app taking executors' signed ``succeeded``
  receipts (as :mod:`bench.outcome_instructions`, tmpfs SQLite), ``N`` a request to
  ``POST /v1/receipts``, or with ``--batch 0`` one a request to ``POST /v1/outcomes``;
* ``courier``: the executor's outbox (``OutboxReporter.flush``) delivering queued
  receipts from a tmpfs SQLite ledger over a real socket, ``N`` a request, or one a
  request with ``--batch 0`` (its fallback to ``POST /v1/outcomes``). The ledger's
  executions and the answering server run in processes valgrind does not count: the
  figure is the courier's, its HTTP client and its delivery records included.

The checkpoint side signs ``--large`` receipts every run, so only the reports differ
between the two counted runs. Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._harness import instructions_per_item

#: The courier's checkpoint: answers every receipt 200, ``/v1/receipts`` per item, or 404
#: there when told to be a checkpoint from before it.
_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
batches = sys.argv[1] == "1"
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status, out = 200, b"{}"
        if self.path == "/v1/receipts":
            if batches:
                n = len(json.loads(body)["receipts"])
                out = json.dumps({"results": [{"status": 200}] * n}).encode()
            else:
                status, out = 404, b'{"error":{"code":"E_NOT_FOUND","message":"Not Found"}}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
server = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


async def _checkpoint(count: int, largest: int, batch: int) -> None:
    """Approve ``10 + largest`` proposals; report ``10 + count`` receipts, ``batch`` a
    request (0: one a request to ``POST /v1/outcomes``)."""
    from airlock.settings import CheckpointSettings
    from bench.bench_checkpoint import _action
    from bench.checkpoint_instructions import _call
    from bench.outcome_instructions import _trusting, receipts
    from services.checkpoint.app import build

    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        values = _trusting(Path(tmp))
        app = build(CheckpointSettings.model_validate(values), sweep_interval=None)
        accounts = app.state.accounts
        accounts.add_user("alice", "bench password 1234", "approver")
        agent = accounts.create_service_token("bench-agent", "agent")
        executor = accounts.create_service_token("bench-executor", "executor")
        person = accounts.login("alice", "bench password 1234")[0]
        async with app.router.lifespan_context(app):
            approved = []
            for n in range(10 + largest):
                proposal = await _call(app, "/v1/proposals", _action(n, "00003"), agent)
                body = json.dumps({"action_hash": proposal["action_hash"]}).encode()
                answer = await _call(app, f"/v1/proposals/{proposal['id']}/approve", body, person)
                approved.append(answer)
            signed = receipts(approved, values["audience"])[: 10 + count]
            step = batch or 1
            for start in range(0, len(signed), step):
                chunk = signed[start : start + step]
                if batch == 0:
                    body = json.dumps({"receipt": chunk[0]}).encode()
                    answer = await _call(app, "/v1/outcomes", body, executor)
                    ok = answer.get("state") == "executed"
                else:
                    items = [{"kind": "outcome", "receipt": r} for r in chunk]
                    body = json.dumps({"receipts": items}).encode()
                    answer = await _call(app, "/v1/receipts", body, executor)
                    ok = all(r["status"] == 200 for r in answer["results"])
                if not ok:
                    raise RuntimeError(f"report failed: {str(answer)[:200]}")
        app.state.checkpoint.db.dispose()


def _prepare(url: str, count: int) -> None:
    """A ledger at ``url`` with ``count`` executions, their receipts queued."""
    from airlock.store import make_engine
    from bench.bench_executor import _bundles, _executor
    from services.executor import migrate

    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    executor = _executor(url)
    for raw in _bundles("r", count):
        executor.execute(raw)
    executor.engine.dispose()


def _courier(count: int, batch: int) -> None:
    """Deliver the receipts of ``10 + count`` executions, ``batch`` a request (0: one a
    request). The ledger is made by a process valgrind does not count."""
    from airlock.store import make_engine
    from services.executor import OutboxReporter, checkpoint_client

    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, "1" if batch else "0"], stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
            url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
            module = "bench.receipts_instructions"
            prepare = [sys.executable, "-m", module, "--side", "courier", "--prepare", url]
            subprocess.run([*prepare, "--child", str(10 + count)], check=True)
            engine = make_engine(url)
            with checkpoint_client(f"http://127.0.0.1:{port}", "t", poll_wait_s=1) as client:
                reporter = OutboxReporter(
                    engine=engine, client=client, clock=lambda: 0, per_request=batch or 1
                )
                done = 0
                while done < 10 + count:
                    flushed = reporter.flush()
                    if not flushed:
                        raise RuntimeError("the courier delivered nothing")
                    done += flushed
            if done != 10 + count:
                raise RuntimeError(f"the courier delivered {done}, not {10 + count}")
            engine.dispose()
    finally:
        server.terminate()
        server.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--side", choices=("checkpoint", "courier"), required=True)
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=120)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--prepare", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.prepare is not None:
        _prepare(args.prepare, args.child)
    elif args.child is not None and args.side == "checkpoint":
        asyncio.run(_checkpoint(args.child, args.large, args.batch))
    elif args.child is not None:
        _courier(args.child, args.batch)
    if args.child is not None:
        return 0
    extra = ["--side", args.side, "--batch", str(args.batch)]
    count = instructions_per_item("bench.receipts_instructions", args.small, args.large, extra)
    how = f"{args.batch} a request" if args.batch else "one a request"
    print(f"-- receipts delivered, {args.side} side, {how}, under valgrind")
    print(f"   instructions per receipt {count / 1e6:10.2f} M")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
