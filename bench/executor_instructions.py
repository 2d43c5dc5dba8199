"""Instructions per execution of the executor's whole path: CPU that no neighbour moves.

``python -m bench.executor_instructions [--small 20] [--large 120]`` runs the path of
``bench_executor`` (a fresh bundle: verify, live re-read, consume, in-memory write,
outcome and receipt) on a SQLite ledger in /dev/shm under valgrind's cachegrind, once
with ``--small`` executions and once with ``--large``, and prints the difference per
execution: start-up, imports and migrations cancel out. Valgrind counts instructions,
not time, so the figure is the same on a quiet machine and a loaded one; it hides the
CPU's newer instruction sets from OpenSSL, so the Ed25519 share reads higher than it
runs natively. Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from airlock.store import make_engine
from bench._harness import instructions_main
from bench.bench_executor import _bundles, _executor
from services.executor import migrate


def _run(count: int, largest: int) -> None:
    """Execute ``count`` fresh bundles after 20 warm-up ones (``largest`` are made, so
    every run signs the same number of bundles)."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
        executor = _executor(url)
        warm, bundles = _bundles("w", 20), _bundles("p", largest)[:count]
        for raw in [*warm, *bundles]:
            outcome = executor.execute(raw)
            if outcome.state is None or outcome.state.value != "succeeded":
                raise RuntimeError(f"bench execution did not succeed: {outcome}")
        executor.engine.dispose()


def main(argv: list[str] | None = None) -> int:
    return instructions_main(
        argv,
        module="bench.executor_instructions",
        doc=__doc__,
        child=_run,
        what="executor path on a tmpfs SQLite ledger, under valgrind (cachegrind)",
        per="execution",
    )


if __name__ == "__main__":
    raise SystemExit(main())
