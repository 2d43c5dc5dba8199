"""``airlock checkpoint``, ``airlock users …``, ``airlock tokens …``: serve and administer it.

Settings come from ``AIRLOCK_CHECKPOINT_*``. The checkpoint service is imported inside
each command (docs/architecture.md#import-boundaries). Passwords are read from a prompt or standard
input, never from an argument (arguments land in shell history and ``ps``); tokens and generated
passwords are printed once and stored only as hashes.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from ._help import Typer

if TYPE_CHECKING:
    from airlock.settings import CheckpointSettings
    from services.checkpoint.auth import Accounts

__all__ = ["checkpoint_command", "tokens_app", "users_app"]

users_app = Typer(name="users", help="People who review proposals.", no_args_is_help=True)
tokens_app = Typer(name="tokens", help="Service tokens (agent, executor).", no_args_is_help=True)


def _settings() -> CheckpointSettings:
    from airlock.settings import CheckpointSettings

    from ._settings import load

    return load(CheckpointSettings)


def checkpoint_command(
    *,
    host: Annotated[
        str | None, typer.Option(metavar="ADDRESS", help="Bind address (default 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8787).")] = None,
) -> None:
    """Serve the checkpoint API (refuses to start on a bad policy, key file or database).

    It also needs the executor's receipt key set (AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH).
    """
    import logging.config

    import uvicorn

    from airlock.store import Error as StoreError
    from services.checkpoint.app import build
    from services.checkpoint.errors import ConfigError

    from ._serve import ServerAnsweringOnStop
    from ._text import inert_log_config

    # Before the app is built: what building it logs is escaped too (uvicorn applies the
    # same configuration again when it starts).
    logging.config.dictConfig(inert_log_config("INFO"))
    settings = _settings()
    if host is not None:  # the address it listens on is a name it answers to
        settings = settings.model_copy(update={"host": host})
    try:
        app = build(settings)
    except (ConfigError, StoreError) as exc:
        typer.echo(f"checkpoint: refusing to start: {exc}", err=True)
        raise typer.Exit(2) from None
    server = ServerAnsweringOnStop(
        uvicorn.Config(
            app,
            host=settings.host,
            port=port or settings.port,
            log_level="info",
            # Every line escaped (airlock.text), a traceback's too: its text can be a request's.
            log_config=inert_log_config("INFO"),
            access_log=False,  # paths are harmless, but keep one policy: no request logging
            # Off: uvicorn would otherwise take X-Forwarded-For from any loopback peer as
            # the client, and a guesser could name a new address with each sign-in. The
            # app trusts it only from AIRLOCK_CHECKPOINT_TRUSTED_PROXIES.
            proxy_headers=False,
            workers=1,
            # Requests still running this long after a stop began are cut. Open feed
            # long-polls are not among them: a stop answers them at once.
            timeout_graceful_shutdown=2,
        ),
        on_exit=app.state.feed_signal.close,
    )
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: a second Ctrl-C
        server.run()
    if not server.started:  # as uvicorn.run: the app did not start (the log says why)
        raise typer.Exit(3)


def _accounts() -> Accounts:
    from airlock.store import Error as StoreError
    from airlock.store import upgrade
    from services.checkpoint import MIGRATIONS, Database
    from services.checkpoint.auth import Accounts

    settings = _settings()
    try:
        db = Database(settings.database_url)
        upgrade(db.engine, MIGRATIONS)
    except StoreError as exc:
        typer.echo(f"checkpoint database: {exc}", err=True)
        raise typer.Exit(2) from None
    import time

    return Accounts(
        db,
        lambda: int(time.time()),
        session_ttl=settings.session_ttl,
        session_idle=settings.session_idle,
        lockout_threshold=settings.lockout_threshold,
        lockout_seconds=settings.lockout_seconds,
        sign_ins=False,  # administration: no one signs in through these
    )


def _refused(exc: Exception) -> typer.Exit:
    typer.echo(f"refused: {exc}", err=True)
    return typer.Exit(1)


@users_app.command("add")
def users_add_command(
    username: Annotated[str, typer.Argument(help="The new person's user name.")],
    role: Annotated[
        Literal["viewer", "approver", "admin"], typer.Option(help="viewer, approver or admin")
    ] = "approver",
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from standard input.")
    ] = False,
    generate: Annotated[
        bool, typer.Option("--generate", help="Generate a password and print it once.")
    ] = False,
) -> None:
    """Add a person. The password is prompted for, read from stdin, or generated.

    A password needs 12+ characters; a common one (30,000 ship with Airlock) is refused.

    So are one character repeated and the user name: E_WEAK_PASSWORD.
    """
    from services.checkpoint.errors import Refusal

    password = _new_password("users add", password_stdin, generate)
    try:
        _accounts().add_user(username, password, role)
    except Refusal as exc:
        raise _refused(exc) from None
    typer.echo(f"added {username} ({role})")
    if generate:
        typer.echo(f"password: {password}")


@users_app.command("disable")
def users_disable_command(
    username: Annotated[str, typer.Argument(help="The person to disable.")],
) -> None:
    """Disable a person and end their sessions."""
    from services.checkpoint.errors import Refusal

    try:
        _accounts().disable_user(username)
    except Refusal as exc:
        raise _refused(exc) from None
    typer.echo(f"disabled {username}")


@users_app.command("unlock")
def users_unlock_command(
    username: Annotated[str, typer.Argument(help="The person whose lockout to end.")],
) -> None:
    """End a sign-in lock now (audited); it also ends by itself after the lockout time.

    An account locks only after failed sign-ins from many addresses; one address is slowed.

    `airlock users sign-ins` shows where the failed sign-ins came from.
    """
    from services.checkpoint.errors import Refusal

    try:
        _accounts().unlock_user(username)
    except Refusal as exc:
        raise _refused(exc) from None
    typer.echo(f"unlocked {username}")


@users_app.command("set-password")
def users_set_password_command(
    username: Annotated[str, typer.Argument(help="The person whose password to replace.")],
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from standard input.")
    ] = False,
    generate: Annotated[
        bool, typer.Option("--generate", help="Generate a password and print it once.")
    ] = False,
) -> None:
    """Replace a person's password (audited): their sessions end and a lockout is cleared.

    The password rules are those of `users add` (E_WEAK_PASSWORD).

    Example: airlock users set-password alice --generate
    """
    from services.checkpoint.errors import Refusal

    password = _new_password("users set-password", password_stdin, generate)
    try:
        _accounts().set_password(username, password)
    except Refusal as exc:
        raise _refused(exc) from None
    typer.echo(f"set the password of {username}; their sessions are ended")
    if generate:
        typer.echo(f"password: {password}")


def _new_password(command: str, password_stdin: bool, generate: bool) -> str:
    """The password from stdin, generated, or prompted for twice; never waits without a tty."""
    if password_stdin:
        return sys.stdin.readline().rstrip("\n")
    if generate:
        return secrets.token_urlsafe(18)
    if sys.stdin.isatty():
        return str(typer.prompt("password", hide_input=True, confirmation_prompt=True))
    typer.echo(f"{command}: give --password-stdin or --generate (no terminal)", err=True)
    raise typer.Exit(2)


@users_app.command("list")
def users_list_command() -> None:
    """List people, their roles, and whether each is disabled or locked out (until when)."""
    now = int(time.time())
    for user in _accounts().list_users():
        flags = " disabled" if user.disabled else ""
        if user.locked_until is not None and user.locked_until > now:
            until = datetime.fromtimestamp(user.locked_until, UTC).strftime("%H:%M:%S UTC")
            flags += f" locked until {until} (users unlock)"
        typer.echo(f"{user.username:24} {user.role:9}{flags}")


@users_app.command("sign-ins")
def users_sign_ins_command(
    hours: Annotated[int, typer.Option(min=1, help="How far back to look, hours.")] = 24,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Refused sign-ins by client address, from the audit chain: a guessing campaign.

    Per address: wrong passwords (and for whom), then unknown names and throttled attempts.

    Unknown names are kept only as keyed hashes; the accounts locked come last.
    """
    import dataclasses
    import json

    report = _accounts().sign_in_report(int(time.time()) - hours * 3600)
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(report), indent=2, sort_keys=True))
        return
    totals = report.totals
    typer.echo(
        f"last {hours} h: {totals.wrong_password} wrong passwords, "
        f"{totals.unknown_name} unknown names ({report.distinct_unknown_names} distinct), "
        f"{totals.throttled} throttled"
    )
    clients = sorted(
        report.clients.items(),
        key=lambda kv: -(kv[1].wrong_password + kv[1].unknown_name_or_throttled),
    )
    typer.echo(f"{'ADDRESS':40} {'WRONG':>6} {'OTHER':>6} USERS")
    for address, c in clients:
        users = ", ".join(f"{u} {n}" for u, n in sorted(c.users.items()))
        typer.echo(f"{address:40} {c.wrong_password:>6} {c.unknown_name_or_throttled:>6} {users}")
    for name in report.locked:
        typer.echo(f"locked: {name} (users unlock)")


@tokens_app.command("create")
def tokens_create_command(
    name: Annotated[str, typer.Argument(help="A name for the token (e.g. agent-1).")],
    role: Annotated[Literal["agent", "executor"], typer.Option(help="agent or executor")],
) -> None:
    """Create a service token and print it once (only its hash is stored)."""
    from services.checkpoint.errors import Refusal

    try:
        token = _accounts().create_service_token(name, role)
    except Refusal as exc:
        raise _refused(exc) from None
    typer.echo(token)


@tokens_app.command("revoke")
def tokens_revoke_command(
    name: Annotated[str, typer.Argument(help="The token's name (tokens list).")],
) -> None:
    """Revoke a service token: it is refused from the next request on (audited)."""
    from services.checkpoint.errors import Refusal

    try:
        _accounts().revoke_service_token(name)
    except Refusal as exc:
        raise _refused(exc) from None
    typer.echo(f"revoked {name}")


@tokens_app.command("list")
def tokens_list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List service tokens: name, role, created, revoked (never the token itself)."""
    import dataclasses
    import json

    tokens = _accounts().list_service_tokens()
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(t) for t in tokens], indent=2))
        return
    typer.echo(f"{'NAME':24} {'ROLE':9} {'CREATED':20} REVOKED")
    for token in tokens:
        revoked = _when(token.revoked_at) if token.revoked_at is not None else "-"
        typer.echo(f"{token.name:24} {token.role:9} {_when(token.created_at):20} {revoked}")


def _when(unix: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
