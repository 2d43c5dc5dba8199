"""An approval during a flood of refused requests, beside the same approval without one.

``python -m bench.bench_refusal_flood [--database-url URL]``. A real uvicorn server on a
loopback port serves the checkpoint (SQLite by default) with its default refusal limits;
each measured call is one ``POST /v1/proposals/{id}/approve`` of a quorum-1 stop by an
approver. Rounds alternate: approvals alone, then approvals while another process sends
forbidden requests (a viewer's ``GET /v1/feed``) from one session at ``--flood-rate`` a
second, served by a second checkpoint process on the same database (a deployment with
two workers), so the figure is what the refusals cost the approvals' commits. A third
kind of round sends ``GET /healthz`` at the same pace: what answering any request costs
on a machine with no core to spare. The goal: the median approval during the flood
takes at most 10 % longer than without it (exit 1 if not).
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import tempfile
import threading
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from bench.bench_checkpoint import _action, checkpoint_values, serve
from devstack.ports import free_port

GOAL = 1.10


def _flood_process(
    settings: dict[str, Any],
    token: str,
    *,
    rate: int,
    ready: Event,
    flooding: Event,
    running: Event,
    done: Event,
    sent: Any,
    control: Any,
) -> None:
    """A second checkpoint process on the same database, and a client flooding it with
    forbidden requests at ``rate`` a second while ``flooding`` is set, until ``done``."""
    from airlock.settings import CheckpointSettings
    from services.checkpoint.app import build

    app = build(CheckpointSettings.model_validate(settings), sweep_interval=None)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)  # readiness poll of the in-process server, not a race wait
    # Requests written by hand on one kept-alive connection: the load generator shares
    # this machine, and an HTTP client library would cost more CPU than what it measures.
    requests = (
        f"GET /v1/feed HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    )
    ready.set()
    while not done.is_set():
        if not flooding.wait(0.1):
            continue
        n = 0
        begin = time.perf_counter()
        kind = int(control.value)
        request = requests[kind].encode()
        # A connection per round: the server closes one idle between rounds.
        with socket.create_connection(("127.0.0.1", port)) as sock:
            while flooding.is_set():
                sock.sendall(request)  # a viewer may not: E_FORBIDDEN, then E_RATE_LIMITED
                _read_response(sock)
                n += 1
                running.set()
                ahead = begin + n / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)  # the flood's pace, not a race wait
        with sent.get_lock():
            sent[kind] += n
        running.clear()
    server.should_exit = True
    thread.join(timeout=30)
    app.state.checkpoint.db.dispose()


def _read_response(sock: socket.socket) -> None:
    """Read one HTTP/1.1 response with a Content-Length (what uvicorn sends here)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the flooded checkpoint closed the connection")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the flooded checkpoint closed the connection")
        body += chunk


def _approve_batch(person: httpx.Client, pending: list[tuple[str, str]]) -> list[float]:
    """Approve each proposal of ``pending`` (id, action hash); the seconds each took."""
    took: list[float] = []
    for proposal_id, digest in pending:
        start = time.perf_counter()
        response = person.post(f"/v1/proposals/{proposal_id}/approve", json={"action_hash": digest})
        took.append(time.perf_counter() - start)
        if response.json().get("state") != "approved":
            raise RuntimeError(f"approve failed: {response.text[:200]}")
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=200, help="approvals per round")
    parser.add_argument("--flood-rate", type=int, default=200, help="forbidden requests/s")
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    args = parser.parse_args(argv)

    from airlock.settings import CheckpointSettings
    from services.checkpoint.app import build

    spawn = multiprocessing.get_context("spawn")  # the server's threads stay here
    alone: list[float] = []
    flooded: list[float] = []
    healthz: list[float] = []
    seconds = [0.0, 0.0]  # flooded with refusals, with /healthz
    with tempfile.TemporaryDirectory() as tmp:
        values = checkpoint_values(Path(tmp), args.database_url)
        app = build(CheckpointSettings.model_validate(values), sweep_interval=None)
        accounts = app.state.accounts
        accounts.add_user("alice", "bench password 1234", "approver")
        accounts.add_user("mallory", "bench password 5678", "viewer")
        agent_token = accounts.create_service_token(f"bench-flood-{int(time.time())}", "agent")
        user_token = accounts.login("alice", "bench password 1234")[0]
        flood_token = accounts.login("mallory", "bench password 5678")[0]

        server, thread, base = serve(app)
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
                    content=_action(counter, "f" + run),
                    headers={"Content-Type": "application/json"},
                ).json()
                counter += 1
                pending.append((body["id"], body["action_hash"]))
            return pending

        ready, flooding, running, done = (spawn.Event() for _ in range(4))
        sent, control = spawn.Array("q", 2), spawn.Value("b", 0)
        events = {"ready": ready, "flooding": flooding, "running": running, "done": done}
        flood = spawn.Process(
            target=_flood_process,
            args=(values, flood_token),
            kwargs={"rate": args.flood_rate, "sent": sent, "control": control, **events},
        )
        flood.start()
        try:
            if not ready.wait(120):
                raise RuntimeError("the flooded checkpoint process did not start")
            _approve_batch(person, submit_batch(10))  # warm up connections and caches
            kinds: list[tuple[int | None, list[float]]] = [
                (None, alone),
                (0, flooded),
                (1, healthz),
            ]
            for round_ in range(args.rounds):
                # Each kind first, second and third in turn: no kind always follows another.
                turn = round_ % len(kinds)
                for kind, into in kinds[turn:] + kinds[:turn]:
                    pending = submit_batch(args.batch)
                    if kind is None:
                        into.extend(_approve_batch(person, pending))
                        continue
                    control.value = kind
                    flooding.set()
                    if not running.wait(60):
                        raise RuntimeError("the flood did not start")
                    start = time.perf_counter()
                    into.extend(_approve_batch(person, pending))
                    seconds[kind] += time.perf_counter() - start
                    flooding.clear()
                    while running.is_set():
                        time.sleep(0.01)  # the round's count is in; not a race wait
        finally:
            flooding.clear()
            done.set()
            flood.join(60)
            agent.close()
            person.close()
            server.should_exit = True
            thread.join(timeout=30)
            rows = _refused_rows(app)
            app.state.checkpoint.db.dispose()

    return _show(
        args, alone=alone, flooded=flooded, healthz=healthz, sent=sent, seconds=seconds, rows=rows
    )


def _show(
    args: argparse.Namespace,
    *,
    alone: list[float],
    flooded: list[float],
    healthz: list[float],
    sent: Any,
    seconds: list[float],
    rows: int,
) -> int:
    """Print the medians and ratios; 0 if the flooded ratio meets the goal, else 1."""
    base_ms = statistics.median(alone) * 1e3
    flood_ms = statistics.median(flooded) * 1e3
    control_ms = statistics.median(healthz) * 1e3
    ratio = flood_ms / base_ms
    backend = "PostgreSQL" if args.database_url else "SQLite (WAL, synchronous=FULL)"
    print(f"checkpoint on {backend}, {args.rounds} rounds of {args.batch} approvals each way")
    print(f"{'approval alone (median)':<40} {base_ms:8.2f} ms")
    print(f"{'approval during the flood (median)':<40} {flood_ms:8.2f} ms")
    print(f"{'approval during a /healthz flood (median)':<40} {control_ms:8.2f} ms")
    print(
        f"{'forbidden requests sent in the floods':<40} {sent[0]:8,d} "
        f"({sent[0] / seconds[0]:,.0f}/s; --flood-rate {args.flood_rate})"
    )
    print(f"{'/healthz requests sent':<40} {sent[1]:8,d} ({sent[1] / seconds[1]:,.0f}/s)")
    print(f"{'checkpoint.refused rows they added':<40} {rows:8,d}")
    print(f"ratio /healthz flood / alone = {control_ms / base_ms:.3f} (the cost of any request)")
    print(f"ratio flooded / alone = {ratio:.3f} (goal <= {GOAL:.2f})")
    return 0 if ratio <= GOAL else 1


def _refused_rows(app: Any) -> int:
    import sqlalchemy as sa

    with app.state.checkpoint.engine.connect() as conn:
        events = conn.execute(sa.text("SELECT event FROM audit_log")).scalars()
        return sum('"checkpoint.refused"' in e for e in events)


if __name__ == "__main__":
    raise SystemExit(main())
