"""Real receivers for notification tests: an HTTP(S) server that records every request
and answers from a script, a policy with a ``[notify]`` table, and secret files."""

from __future__ import annotations

import base64
import secrets
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from services.checkpoint.app import DEFAULT_POLICY
from services.checkpoint.policy import Policy

#: How long a "hang" answer holds a request before it answers 200 (or is released).
HANG_S = 15.0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """What a :func:`receiver` got, and the answers it gives: ``script`` is consumed one
    item per request (``500``, ``200``, ``"hang"``), then ``200`` for ever."""

    url: str = ""
    script: list[int | str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    hanging: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self) -> int | str:
        with self.lock:
            return self.script.pop(0) if self.script else 200

    def got(self) -> list[Seen]:
        with self.lock:
            return list(self.seen)


@contextmanager
def receiver(
    script: list[int | str] | None = None, *, tls: ssl.SSLContext | None = None
) -> Iterator[Receiver]:
    """A real HTTP server on loopback (HTTPS with ``tls``), in threads of this process."""
    state = Receiver(script=list(script or []))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with state.lock:
                state.seen.append(
                    Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
            answer = state.answer()
            if answer == "hang":
                state.hanging.set()
                state.release.wait(HANG_S)
                answer = 200
            self.send_response(int(answer))
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    scheme = "http"
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    state.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()


def webhook_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def write_secret(directory: Path, name: str, value: str) -> Path:
    path = directory / name
    path.write_text(value + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


#: A rule routing proposals tagged ``team = payments*`` to group ``payments``, then
#: ``leads`` once an hour passes unanswered.
ROUTED_RULE = """
[[rule]]
name = "payments-routed"
effect = "approve"
quorum = {quorum}
match.tags = [{{ key = "team", value_prefix = "payments" }}]
route = ["payments", "leads"]
sla = "1h"
{extra}
"""
#: The groups ``ROUTED_RULE`` names.
GROUPS = """
[groups.payments]
members = ["alice", "bob"]
{payments}
[groups.leads]
members = ["carol"]
{leads}
"""
ROUTED_TAGS = {"team": "payments-eu"}
SLA_S = 3600


def routed_policy(
    notify_toml: str,
    *,
    quorum: int = 1,
    rule_extra: str = "",
    payments: str = "",
    leads: str = "",
    members: str = '"alice", "bob"',
) -> Policy:
    """The shipped policy with ``ROUTED_RULE`` first, ``GROUPS`` and ``notify_toml``."""
    text = DEFAULT_POLICY.read_text(encoding="utf-8")
    first = text.index("\n[[rule]]") + 1
    rule = ROUTED_RULE.format(quorum=quorum, extra=rule_extra)
    groups = GROUPS.format(payments=payments, leads=leads).replace('"alice", "bob"', members)
    body = text[:first] + rule + "\n" + text[first:] + groups + "\n" + notify_toml
    return Policy.from_bytes(body.encode(), "test")


def notify_policy(notify_toml: str) -> Policy:
    """The shipped policy, routed as :func:`routed_policy`, with ``notify_toml``."""
    return routed_policy(notify_toml)
