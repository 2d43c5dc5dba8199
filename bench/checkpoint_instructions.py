"""Instructions per HTTP approve in the checkpoint: CPU that no neighbour moves.

``python -m bench.checkpoint_instructions [--small 20] [--large 120]`` sends
``POST /v1/proposals/{id}/approve`` (a quorum-1 stop, as ``bench_checkpoint``) straight
to the checkpoint's ASGI app, every middleware, the token lookup, the vote's transaction
and the answer included, on a SQLite database in /dev/shm, under valgrind's cachegrind:
once with ``--small`` approvals and once with ``--large``, and prints the difference per
approve (start-up, sign-in and the proposals submitted beforehand cancel out). No HTTP
client or server: the figure is the app's own. Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from bench._harness import instructions_main
from bench.bench_checkpoint import _action, checkpoint_values


async def _call(app: Any, path: str, body: bytes, token: str) -> dict[str, Any]:
    """One POST through ``app``; its JSON answer."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 80),
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", f"Bearer {token}".encode()),
        ],
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    answer = bytearray()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            answer.extend(message.get("body", b""))

    await app(scope, receive, send)
    value: dict[str, Any] = json.loads(answer)
    return value


async def _approve_all(count: int, largest: int) -> None:
    from airlock.settings import CheckpointSettings
    from services.checkpoint.app import build

    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        values = checkpoint_values(Path(tmp), None)
        app = build(CheckpointSettings.model_validate(values), sweep_interval=None)
        accounts = app.state.accounts
        accounts.add_user("alice", "bench password 1234", "approver")
        agent = accounts.create_service_token("bench-agent", "agent")
        person = accounts.login("alice", "bench password 1234")[0]
        async with app.router.lifespan_context(app):
            # Every run submits as many proposals (10 warm-up ones, then ``largest``).
            pending = [
                await _call(app, "/v1/proposals", _action(n, "00001"), agent)
                for n in range(10 + largest)
            ]
            for proposal in pending[: 10 + count]:
                body = json.dumps({"action_hash": proposal["action_hash"]}).encode()
                answer = await _call(app, f"/v1/proposals/{proposal['id']}/approve", body, person)
                if answer.get("state") != "approved":
                    raise RuntimeError(f"approve failed: {str(answer)[:200]}")
        app.state.checkpoint.db.dispose()


def main(argv: list[str] | None = None) -> int:
    return instructions_main(
        argv,
        module="bench.checkpoint_instructions",
        doc=__doc__,
        child=lambda n, large: asyncio.run(_approve_all(n, large)),
        what="HTTP approve through the checkpoint's ASGI app, tmpfs SQLite, under valgrind",
        per="approve",
    )


if __name__ == "__main__":
    raise SystemExit(main())
