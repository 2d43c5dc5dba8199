"""``airlock login`` and ``airlock logout``: a person's own session at the checkpoint.

The password is read from a hidden prompt or from standard input, never from an argument
(arguments land in shell history and ``ps``). The session token is stored as described
in ``_session.py`` and is never printed. These commands are clients of the checkpoint's
HTTP API and import no service.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Final
from urllib.parse import urlsplit

import typer

from ._client import (
    CheckpointClient,
    CheckpointRefused,
    CheckpointUnavailable,
    ExitCode,
    handle_errors,
)
from ._text import say

if TYPE_CHECKING:
    from airlock.api import LoginAnswer

__all__ = ["login_command", "logout_command"]

DEFAULT_URL: Final = "http://127.0.0.1:8787"
_LOOPBACK: Final = frozenset({"127.0.0.1", "::1", "localhost"})


def _when(unix: int) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _end_unheld(base: str, out: LoginAnswer) -> str:
    """End a session that could not be stored (no one could use or log it out); say how it went."""
    try:
        with CheckpointClient(base, out.token) as client:
            client.call("DELETE", "/v1/sessions/current")
    except (CheckpointRefused, CheckpointUnavailable):
        return f"the session the checkpoint issued stays valid until {_when(out.expires_at)}"
    return "the session the checkpoint issued was ended"


def login_command(
    *,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help=f"Checkpoint base URL (default: $AIRLOCK_CHECKPOINT_URL, else {DEFAULT_URL}).",
        ),
    ] = None,
    username: Annotated[
        str | None, typer.Option("--username", "-u", help="Your user name (prompted if absent).")
    ] = None,
    password_stdin: Annotated[
        bool,
        typer.Option("--password-stdin", help="Read the password from the first line of stdin."),
    ] = False,
) -> None:
    """Sign in to the checkpoint and keep the session in a private (0600) file.

    The session file is $AIRLOCK_HOME/session.json (default ${XDG_CONFIG_HOME:-~/.config}/airlock/).

    AIRLOCK_HOME names only this session directory; airlock up's state is AIRLOCK_UP_HOME.

    Scripts may set AIRLOCK_TOKEN and AIRLOCK_CHECKPOINT_URL instead of logging in.

    Example: airlock login --url https://checkpoint.example --username alice

    Exit codes: 0 logged in; 1 refused (wrong password, locked, slowed); 2 usage; 3 unreachable.

    E_THROTTLED: failed sign-ins from your address slow the next ones; it says when to retry.
    """
    # Here, not at the top: ``airlock --help`` must not pay for pydantic.
    from pydantic import ValidationError

    from airlock.api import LoginAnswer

    from ._session import (
        SessionError,
        StoredSession,
        check_url,
        prepare_session_dir,
        session_path,
        write_session,
    )

    with handle_errors(hint_login=False):
        base = check_url(url or os.environ.get("AIRLOCK_CHECKPOINT_URL") or DEFAULT_URL)
        host = urlsplit(base).hostname or ""
        if base.startswith("http://") and host not in _LOOPBACK:
            typer.echo(
                f"warning: {base} is plain HTTP; your password and token cross the network "
                "unencrypted",
                err=True,
            )
        path = session_path()
        # Before the password is sent: an unusable directory found only after the
        # checkpoint issued a session would leave that session with no one to hold it.
        prepare_session_dir(path)
        interactive = sys.stdin.isatty()
        if username is None:
            if not interactive or password_stdin:
                typer.echo("login: give --username (no terminal to ask on)", err=True)
                raise typer.Exit(ExitCode.USAGE)
            username = typer.prompt("username")
        if password_stdin:
            password = sys.stdin.readline().rstrip("\r\n")
        elif interactive:
            password = typer.prompt("password", hide_input=True)
        else:
            typer.echo("login: use --password-stdin (no terminal to ask on)", err=True)
            raise typer.Exit(ExitCode.USAGE)
        if not password:
            typer.echo("login: empty password", err=True)
            raise typer.Exit(ExitCode.USAGE)
        with CheckpointClient(base) as client:
            body = client.call(
                "POST", "/v1/sessions", json={"username": username, "password": password}
            )
        try:
            out = LoginAnswer.model_validate(body)
        except ValidationError:
            raise CheckpointUnavailable(
                f"{base} answered a login with an unexpected body"
            ) from None
        try:
            write_session(
                path,
                StoredSession(
                    url=base, token=out.token, username=out.username, expires_at=out.expires_at
                ),
            )
        except SessionError as exc:
            raise SessionError(f"{exc}; {_end_unheld(base, out)}") from None
    # The name and role are the checkpoint's answer (and the name is kept in the file).
    say(
        f"logged in to {base} as {out.username} ({out.role}) until {_when(out.expires_at)}; "
        f"session in {path}"
    )


def logout_command(
    *,
    forget: Annotated[
        bool,
        typer.Option(
            "--forget",
            help="Delete the session file even if the checkpoint cannot be told (or the file "
            "is unsafe).",
        ),
    ] = False,
) -> None:
    """End your session at the checkpoint, then delete the session file.

    If the checkpoint cannot be reached the file is kept and the exit code is 3.

    --forget deletes the file anyway (the token then stays valid until it expires).

    AIRLOCK_TOKEN is never revoked by this command.
    """
    from ._session import SessionError, delete_session, read_session, session_path

    path = session_path()
    try:
        session = read_session(path)
    except SessionError as exc:
        if not forget:
            say(f"error: {exc}", err=True)
            raise typer.Exit(ExitCode.USAGE) from None
        delete_session(path)
        typer.echo(f"deleted {path} without telling the checkpoint")
        return
    if session is None:
        typer.echo("not logged in")
        return
    try:
        with CheckpointClient(session.url, session.token) as client:
            client.call("DELETE", "/v1/sessions/current")
        ended = "session ended at the checkpoint"
    except CheckpointRefused as exc:
        if exc.code != "E_UNAUTHENTICATED":
            say(f"refused: {exc.code}: {exc.message}", err=True)
            raise typer.Exit(ExitCode.REFUSED) from None
        ended = "the session had already ended"
    except CheckpointUnavailable as exc:
        if not forget:
            say(f"error: {exc}", err=True)
            typer.echo(
                "the session file is kept so you can log out later; --forget deletes it anyway",
                err=True,
            )
            raise typer.Exit(ExitCode.UNAVAILABLE) from None
        ended = "the checkpoint could not be told; the token stays valid until it expires"
    delete_session(path)
    say(f"logged out {session.username} ({ended})")
