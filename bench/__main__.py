"""``python -m bench``: run every ``bench/bench_*.py`` in turn (not tests; figures only)."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import bench


def main() -> int:
    names = sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_")
    )
    only = set(sys.argv[1:])
    status = 0
    for name in names:
        if only and name not in only:
            continue
        print(f"== {name}")
        module = importlib.import_module(f"bench.{name}")
        status |= module.main([])
        print()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
