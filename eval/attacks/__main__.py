"""``python -m eval.attacks [--cloud devcloud|moto] [--only NAME]… [--out FILE]``: run the
attack suite.

Starts one rig against the cloud (devcloud by default; ``moto``: a moto server with IAM
enforced, AWS-shaped actions), runs every attack (or those named), prints progress, and
writes the report (the whole suite writes ``eval/RESULTS.md``, or ``eval/RESULTS-moto.md``
for moto, unless ``--out`` says otherwise; a partial run writes only where ``--out``
says). Exit 0 when every attack was refused as expected, 1 on any miss, 2 on a usage
error.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from .clouds import CLOUDS
from .runner import RESULTS, render, run_suite, selected

_EVAL = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.attacks", description=__doc__)
    parser.add_argument("--cloud", choices=CLOUDS, default="devcloud")
    parser.add_argument("--only", action="append", default=[], metavar="NAME")
    parser.add_argument("--out", type=Path, default=None, help="where to write RESULTS.md")
    parser.add_argument("--list", action="store_true", help="list the attacks and exit")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    try:
        attacks = selected(args.only)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    if args.list:
        for a in attacks:
            print(f"{a.name:48} {a.expect:28} {a.surface}")
        return 0
    whole = None if args.only else _EVAL / RESULTS[args.cloud]
    out = args.out if args.out is not None else whole
    workdir = Path(tempfile.mkdtemp(prefix="airlock-attacks-"))
    suite = run_suite(
        workdir, args.only, progress=lambda line: print(line, flush=True), cloud=args.cloud
    )
    if out is not None:
        out.write_text(render(suite), encoding="utf-8")
        print(f"wrote {out}")
    misses = len(suite.misses)
    print(f"{len(suite.results)} attacks, {misses} missed; chains {suite.chains}")
    if suite.ok and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"work directory (logs): {workdir}")
    return 0 if suite.ok else 1


if __name__ == "__main__":
    sys.exit(main())
