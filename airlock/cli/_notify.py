"""``airlock notify …``: try a notification channel, see and re-send the outbox.

Run where the checkpoint runs: settings come from ``AIRLOCK_CHECKPOINT_*`` (its policy,
for the channels and their secret files; its database, for the outbox). The service is
imported inside each command (docs/architecture.md#import-boundaries).
"""

from __future__ import annotations

import json
import secrets
import time
from typing import TYPE_CHECKING, Annotated

import typer

from ._help import Typer
from ._text import say

if TYPE_CHECKING:
    from services.checkpoint.notify import Outbox
    from services.checkpoint.policy import Policy

__all__ = ["notify_app"]

notify_app = Typer(
    name="notify",
    help="Notification channels and their outbox (docs/notifications.md).",
    no_args_is_help=True,
)


def _policy() -> Policy:
    from services.checkpoint.app import DEFAULT_POLICY
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.policy import load_policy

    from ._checkpoint import _settings

    try:
        return load_policy(_settings().policy_path or DEFAULT_POLICY)
    except ConfigError as exc:
        typer.echo(f"notify: {exc}", err=True)
        raise typer.Exit(2) from None


def _outbox() -> Outbox:
    from airlock.store import Error as StoreError
    from airlock.store import upgrade
    from services.checkpoint import MIGRATIONS, Database
    from services.checkpoint.notify import Outbox

    from ._checkpoint import _settings

    try:
        db = Database(_settings().database_url)
        upgrade(db.engine, MIGRATIONS)
    except StoreError as exc:
        typer.echo(f"checkpoint database: {exc}", err=True)
        raise typer.Exit(2) from None
    return Outbox(db.engine, lambda: int(time.time()))


@notify_app.command("test")
def notify_test_command(
    channel: Annotated[str, typer.Argument(help="A channel named in the policy's [notify].")],
) -> None:
    """Send a test message through one channel now, and say whether it arrived.

    Exit 0: the receiver took it; 1: it did not; 2: no such channel, or its secret.
    """
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.notify import DeliveryError, open_channels, sample_body

    config = _policy().notify
    if config.channel(channel) is None:
        names = ", ".join(c.name for c in config.channels) or "none"
        say(f"notify: E_NOT_FOUND: no channel {channel!r} (configured: {names})", err=True)
        raise typer.Exit(2)
    try:
        sender = open_channels(config)[channel]
    except ConfigError as exc:
        typer.echo(f"notify: {exc}", err=True)
        raise typer.Exit(2) from None
    event_id = "msg_" + secrets.token_hex(16)
    try:
        sender.send(sample_body(event_id, channel, int(time.time())))
    except DeliveryError as exc:
        say(f"notify: E_DELIVERY: {channel}: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"sent {event_id} to {channel}")


@notify_app.command("outbox")
def notify_outbox_command(
    dead: Annotated[bool, typer.Option("--dead", help="Only the dead deliveries.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a line.")] = False,
    resend: Annotated[
        int | None,
        typer.Option(metavar="ID", help="Put a dead delivery back to be sent now."),
    ] = None,
) -> None:
    """List pending and dead deliveries, oldest first; or re-send a dead one.

    A delivery is dead once its retry window (24 h by default) passed unanswered.

    --resend ID sends a dead one again now, with a new window.
    """
    outbox = _outbox()
    if resend is not None:
        if not outbox.resend(resend):
            say(f"notify: E_STATE: delivery {resend} is not dead", err=True)
            raise typer.Exit(1)
        typer.echo(f"delivery {resend} is pending again")
        return
    rows = outbox.listing(["dead"] if dead else ["pending", "dead"])
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row.value(), sort_keys=True))
        return
    if not rows:
        typer.echo("nothing pending or dead")
        return
    for row in rows:
        error = f"  {row.last_error}" if row.last_error else ""
        say(
            f"{row.id:>6}  {row.state:<7}  {row.channel:<16}  {row.kind:<20}  "
            f"{row.proposal_id}  tries={row.attempts}{error}"
        )
