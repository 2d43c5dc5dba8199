"""Instructions per proposal submitted to the checkpoint: CPU that no neighbour moves.

``python -m bench.propose_instructions [--small 20] [--large 120]`` sends
``POST /v1/proposals`` (an agent's stop of an idle instance, which the bench policy puts
to one person's vote) straight to the checkpoint's ASGI app, every middleware, the token
lookup, the strict parse, the policy's decision, the proposal's transaction and the
answer included, on a SQLite database in /dev/shm, under valgrind's cachegrind: once
with ``--small`` proposals and once with ``--large``, and prints the difference per
proposal (start-up, the token and 10 warm-up proposals cancel out). No HTTP client or
server: the figure is the app's own. Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from bench._harness import instructions_main
from bench.bench_checkpoint import _action, checkpoint_values
from bench.checkpoint_instructions import _call


async def _propose_all(count: int) -> None:
    from airlock.settings import CheckpointSettings
    from services.checkpoint.app import build

    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        values = checkpoint_values(Path(tmp), None)
        app = build(CheckpointSettings.model_validate(values), sweep_interval=None)
        agent = app.state.accounts.create_service_token("bench-agent", "agent")
        async with app.router.lifespan_context(app):
            for n in range(10 + count):
                answer = await _call(app, "/v1/proposals", _action(n, "00001"), agent)
                if answer.get("state") != "pending":
                    raise RuntimeError(f"submit failed: {str(answer)[:200]}")
        app.state.checkpoint.db.dispose()


def main(argv: list[str] | None = None) -> int:
    return instructions_main(
        argv,
        module="bench.propose_instructions",
        doc=__doc__,
        child=lambda n, _large: asyncio.run(_propose_all(n)),
        what="HTTP submit through the checkpoint's ASGI app, tmpfs SQLite, under valgrind",
        per="proposal",
    )


if __name__ == "__main__":
    raise SystemExit(main())
