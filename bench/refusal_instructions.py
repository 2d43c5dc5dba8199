"""Instructions per executor refusal report in the checkpoint: CPU that no neighbour moves.

``python -m bench.refusal_instructions [--small 20] [--large 120]``: as
:mod:`bench.outcome_instructions`, with ``POST /v1/refusals`` of an executor's signed
refusal before use (another audience's executor, ``E_AUDIENCE``): a note on the approved
proposal, its state unchanged. Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import argparse
import asyncio

from bench._harness import instructions_per_item
from bench.outcome_instructions import report_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=120)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        asyncio.run(report_all(args.child, args.large, refused=True))
        return 0
    per = instructions_per_item("bench.refusal_instructions", args.small, args.large)
    print("-- HTTP refusal report through the checkpoint's ASGI app, tmpfs SQLite, under valgrind")
    print(f"   instructions per refusal report   {per / 1e6:10.2f} M")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
