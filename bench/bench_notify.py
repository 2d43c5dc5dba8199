"""The approve path with three notification channels, one of them hanging, beside none.

``python -m bench.bench_notify [--rounds N] [--batch N]`` (or ``make bench``). Two
``airlock checkpoint`` processes on SQLite, alike but for the policy: one without a
``[notify]`` table, one with a signed webhook (a local receiver answering 200), email
(a local SMTP server with STARTTLS) and Slack pointed at a listener that accepts and
never answers, so every Slack send hangs for its whole timeout; the receivers run in a
process of their own, apart from the client that times. Each measured call is one
``POST /v1/proposals/{id}/approve`` (which also writes the approval's event and its
three deliveries); rounds alternate between the two. Goal: the median approve latency
with the channels is within 10 % of none (ratio <= 1.10): sending is the worker's, never
the request's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from bench.bench_checkpoint import _action, checkpoint_values
from devstack.ports import free_port

GOAL = 1.10
_PASSWORD = "bench password 1234"


class _Ok(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _webhook_receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def _hanging_listener() -> Iterator[str]:
    """Accepts every connection and never sends a byte (the TLS handshake waits)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}/services/T/B/X"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench-smtp")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "smtp.pem", directory / "smtp.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@contextmanager
def _smtp_server(directory: Path) -> Iterator[tuple[int, Path]]:
    from aiosmtpd.controller import Controller

    class Sink:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            return "250 OK"

    cert_file, key_file = _self_signed(directory)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    port = free_port()
    controller = Controller(
        Sink(), hostname="127.0.0.1", port=port, tls_context=context, require_starttls=True
    )
    controller.start()
    try:
        yield port, cert_file
    finally:
        controller.stop()


def _notify_table(root: Path, hook: str, hang: str, smtp: tuple[int, Path]) -> str:
    secret = root / "hook.secret"
    secret.write_text("whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" + "\n")
    slack = root / "slack.url"
    slack.write_text(hang + "\n")
    return f"""
[notify]
proposal_url = "https://airlock.example/proposals/{{proposal_id}}"
timeout = 10
[notify.channels.hook]
type = "webhook"
url = "{hook}"
secret_file = "{secret}"
[notify.channels.slack]
type = "slack"
url_file = "{slack}"
[notify.channels.mail]
type = "email"
host = "127.0.0.1"
port = {smtp[0]}
from = "airlock@example.com"
to = ["ops@example.com"]
ca_file = "{smtp[1]}"
"""


class _Checkpoint:
    """``airlock checkpoint`` in a process of its own, with a person and an agent."""

    def __init__(self, root: Path, notify: str) -> None:
        from airlock.store import upgrade
        from services.checkpoint import Database
        from services.checkpoint.app import DEFAULT_POLICY, MIGRATIONS
        from services.checkpoint.auth import Accounts

        root.mkdir()
        values = checkpoint_values(root, None)
        policy = root / "policy.toml"
        policy.write_bytes(DEFAULT_POLICY.read_bytes() + notify.encode())
        db = Database(values["database_url"])
        upgrade(db.engine, MIGRATIONS)
        accounts = Accounts(
            db,
            lambda: int(time.time()),
            session_ttl=3600,
            session_idle=3600,
            lockout_threshold=100,
            lockout_seconds=60,
        )
        accounts.add_user("alice", _PASSWORD, "approver")
        self.person = accounts.login("alice", _PASSWORD)[0]
        self.agent = accounts.create_service_token("bench-agent", "agent")
        db.dispose()
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env |= {
            "AIRLOCK_ENV": "prod",
            "AIRLOCK_CHECKPOINT_DATABASE_URL": values["database_url"],
            "AIRLOCK_CHECKPOINT_KEYS_DIR": str(values["keys_dir"]),
            "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH": str(values["receipt_keys_path"]),
            "AIRLOCK_CHECKPOINT_AUDIENCE": values["audience"],
            "AIRLOCK_CHECKPOINT_POLICY_PATH": str(policy),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "airlock.cli", "checkpoint", "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:  # readiness poll of a starting process, not a race wait
            if self.process.poll() is not None:
                raise RuntimeError("the checkpoint did not start")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)
        self.agent_client = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {self.agent}"}
        )
        self.person_client = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {self.person}"}
        )
        self.counter = 0

    def submit(self, size: int) -> list[tuple[str, str]]:
        pending = []
        for _ in range(size):
            body = self.agent_client.post(
                "/v1/proposals",
                content=_action(self.counter, f"{self.port:05d}"),
                headers={"Content-Type": "application/json"},
            ).json()
            self.counter += 1
            pending.append((body["id"], body["action_hash"]))
        return pending

    def approve(self, pending: list[tuple[str, str]]) -> list[float]:
        """Each approval's latency, seconds."""
        took = []
        for proposal_id, digest in pending:
            start = time.perf_counter()
            response = self.person_client.post(
                f"/v1/proposals/{proposal_id}/approve", json={"action_hash": digest}
            )
            took.append(time.perf_counter() - start)
            if response.json().get("state") != "approved":
                raise RuntimeError(f"approve failed: {response.text[:200]}")
        return took

    def close(self) -> None:
        self.agent_client.close()
        self.person_client.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def _serve_receivers(root: str, ready: Any, stop: Any) -> None:
    """The webhook receiver, the hanging Slack listener and the SMTP server, in a process
    of their own until ``stop`` is set: their threads never share the timing client's
    interpreter (its GIL), as real receivers never would."""
    with (
        _webhook_receiver() as hook,
        _hanging_listener() as hang,
        _smtp_server(Path(root)) as smtp,
    ):
        ready.send((hook, hang, smtp[0], str(smtp[1])))
        stop.wait()


@contextmanager
def _receivers(root: Path) -> Iterator[tuple[str, str, tuple[int, Path]]]:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    stop = context.Event()
    process = context.Process(target=_serve_receivers, args=(str(root), theirs, stop))
    process.start()
    try:
        if not ours.poll(60):
            raise RuntimeError("the receivers did not start")
        hook, hang, port, cert = ours.recv()
        yield hook, hang, (port, Path(cert))
    finally:
        stop.set()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100, help="approvals per round")
    parser.add_argument(
        "--aa",
        action="store_true",
        help="configure no channel on either checkpoint: the machine's noise floor (A/A)",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp, _receivers(Path(tmp)) as (hook, hang, smtp):
        root = Path(tmp)
        bare = _Checkpoint(root / "none", "")
        table = "" if args.aa else _notify_table(root, hook, hang, smtp)
        notified = _Checkpoint(root / "three", table)
        try:
            for cp in (bare, notified):  # warm up connections and caches
                cp.approve(cp.submit(10))
            samples: dict[str, list[float]] = {"none": [], "three": []}
            for _ in range(args.rounds):
                for name, cp in (("none", bare), ("three", notified)):
                    samples[name].append(statistics.median(cp.approve(cp.submit(args.batch))))
        finally:
            bare.close()
            notified.close()

    none = statistics.median(samples["none"])
    three = statistics.median(samples["three"])
    ratio = three / none
    print(f"checkpoint on SQLite, {args.rounds} rounds of {args.batch} approvals each")
    print(f"{'approve, no channels':<44} {none * 1e3:8.2f} ms median")
    other = "approve, no channels (A/A)" if args.aa else "approve, 3 channels (Slack hanging)"
    print(f"{other:<44} {three * 1e3:8.2f} ms median")
    verdict = "meets" if ratio <= GOAL else "ABOVE"
    print(f"ratio with channels / none = {ratio:.3f} ({verdict} goal <= {GOAL:.2f})")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
