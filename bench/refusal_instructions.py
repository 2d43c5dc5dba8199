"""Instructions per executor refusal report in the checkpoint: CPU that no neighbour moves.

``python -m bench.refusal_instructions [--small 20] [--large 120]``: as
:mod:`bench.outcome_instructions`, with ``POST /v1/refusals`` of an executor's signed
refusal before use (another audience's executor, ``E_AUDIENCE``): a note on the approved
proposal, its state unchanged. Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import asyncio

from bench._harness import instructions_main
from bench.outcome_instructions import report_all


def main(argv: list[str] | None = None) -> int:
    return instructions_main(
        argv,
        module="bench.refusal_instructions",
        doc=__doc__,
        child=lambda n, large: asyncio.run(report_all(n, large, refused=True)),
        what="HTTP refusal report through the checkpoint's ASGI app, tmpfs SQLite, under valgrind",
        per="refusal report",
    )


if __name__ == "__main__":
    raise SystemExit(main())
