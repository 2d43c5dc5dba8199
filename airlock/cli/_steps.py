"""Run several ``airlock`` commands in one process: ``airlock up``'s first-run setup.

``python -m airlock.cli._steps`` reads a JSON list of ``{"args": [...], "env": {...}}``
from standard input and runs each command in order, in this process, with exactly that
environment (each command reads its settings from it); one interpreter and one import
of the services instead of one per command. It writes the JSON list of what each
command printed to standard output, or stops at the first command that fails and writes
``{"failed": index, "code": exit code, "stderr": text}`` with exit status 1.

Only ``up`` runs it, with argv it built itself; it is not a command of the CLI.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["run_steps"]


def _run_one(args: Sequence[str], env: Mapping[str, str]) -> tuple[int, str, str]:
    """Run one command with ``env`` as the whole environment: (exit code, out, err)."""
    import typer.main

    from . import app

    command = typer.main.get_command(app)
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    code: Any = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = command.main(args=list(args), prog_name="airlock", standalone_mode=False)
        except SystemExit as exc:  # typer.Exit and click's errors both end up here
            code = exc.code
        except Exception as exc:  # one line, as `airlock` itself would end
            err.write(f"error: {type(exc).__name__}: {exc}\n")
            code = 1
    return (
        (code if isinstance(code, int) else 0 if code is None else 1),
        out.getvalue(),
        (err.getvalue()),
    )


def run_steps(steps: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, Any] | None]:
    """Run ``steps`` in order: the output of each, and the failure that stopped them."""
    outputs: list[str] = []
    for index, step in enumerate(steps):
        code, out, err = _run_one(step["args"], step["env"])
        if code != 0:
            return outputs, {"failed": index, "code": code, "stderr": err}
        outputs.append(out)
    return outputs, None


def main() -> None:
    outputs, failure = run_steps(json.load(sys.stdin))
    if failure is not None:
        json.dump(failure, sys.stdout)
        raise SystemExit(1)
    json.dump(outputs, sys.stdout)


if __name__ == "__main__":
    main()
