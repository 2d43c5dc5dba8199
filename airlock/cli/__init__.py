"""The ``airlock`` command line: the composition root.

This is the one place that wires services together, and it imports each service lazily,
only inside the command that starts it (docs/architecture.md#import-boundaries), so
``airlock --help`` loads no service and no secret.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ._agent import agent_app
from ._approvals import approvals_app
from ._approvals_edit import edit_command
from ._audit import audit_app
from ._checkpoint import checkpoint_command, tokens_app, users_app
from ._config import config_command
from ._conformance import conformance_command
from ._devcloud import devcloud_app
from ._doctor import doctor_command
from ._executor import executor_app
from ._gate import gate_app
from ._help import Typer
from ._keys import keys_app
from ._login import login_command, logout_command
from ._mcp import mcp_app
from ._notify import notify_app
from ._receipts import receipts_app
from ._up import up_command
from ._webapp import webapp_command

__all__ = ["app", "main"]

app = Typer(
    name="airlock",
    help="Airlock: human approval, bound byte for byte, between an AI agent and production.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from airlock import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            # Eager, with a callback: handled while parsing, before click asks for a command.
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """Airlock: human approval, bound byte for byte, between an AI agent and production."""


app.command("up")(up_command)
app.command("conformance")(conformance_command)
app.command("config")(config_command)
app.add_typer(agent_app)
app.add_typer(audit_app)
app.add_typer(devcloud_app)
app.command("webapp")(webapp_command)
app.command("checkpoint")(checkpoint_command)
app.add_typer(keys_app)
app.add_typer(users_app)
app.add_typer(tokens_app)
app.add_typer(executor_app)
app.add_typer(receipts_app)
app.add_typer(mcp_app)
app.add_typer(notify_app)
app.command("login")(login_command)
app.command("logout")(logout_command)
# Its own module: _approvals.py is near the module size limit.
approvals_app.command("edit")(edit_command)
app.add_typer(approvals_app)
app.add_typer(gate_app)
app.command("doctor")(doctor_command)


def main() -> None:
    """The ``airlock`` script: ``app`` with one line, not a traceback, for a database
    that cannot be reached (down, wrong host, port or credentials), whichever command
    met it first."""
    try:
        app()
    except Exception as exc:
        # Not ``except OperationalError``: importing SQLAlchemy to name it would cost every
        # command, ``--help`` too, a tenth of a second. A command that met the database has
        # imported it, so one that did not cannot have raised it.
        errors = sys.modules.get("sqlalchemy.exc")
        if errors is None or not isinstance(exc, errors.OperationalError):
            raise
        from ._text import say

        # The driver's text, which can quote a server's answer: escaped, and never empty.
        lines = str(exc.orig or exc).strip().splitlines()
        reason = lines[0] if lines else type(exc.orig or exc).__name__
        say(f"error: the database cannot be reached: {reason}", err=True)
        raise SystemExit(2) from None
