"""``airlock keys generate|rotate|revoke|list|export-public``: the checkpoint's signing keys.

The key directory is the checkpoint's (``AIRLOCK_CHECKPOINT_KEYS_DIR``). Private keys are
written mode 0600 and never printed; ``export-public`` writes the key set the executor
trusts. The checkpoint service is imported inside each command (DESIGN §1).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer

from ._help import Typer

__all__ = ["keys_app"]

keys_app = Typer(
    name="keys",
    help="The checkpoint's Ed25519 signing keys: generate, rotate, revoke, list, export.",
    no_args_is_help=True,
)

KeysDir = Annotated[
    Path,
    typer.Option(
        "--keys-dir",
        metavar="DIR",
        envvar="AIRLOCK_CHECKPOINT_KEYS_DIR",
        help="The checkpoint's key directory.",
    ),
]
_DEFAULT_DIR = Path(".airlock/keys")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"keys: {message}", err=True)
    return typer.Exit(2)


@keys_app.command("generate")
def generate_command(keys_dir: KeysDir = _DEFAULT_DIR) -> None:
    """Create the first signing key (refused if a key set exists: use rotate)."""
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keys import KeyDirectory

    try:
        record = KeyDirectory(keys_dir).generate(int(time.time()))
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"generated {record.kid} (active) in {keys_dir}")


@keys_app.command("rotate")
def rotate_command(keys_dir: KeysDir = _DEFAULT_DIR) -> None:
    """Make a new active key; the old one is retired and still verifies approvals in flight."""
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keys import KeyDirectory

    try:
        record = KeyDirectory(keys_dir).rotate(int(time.time()))
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"rotated: {record.kid} is active; re-export the public key set for executors")


@keys_app.command("revoke")
def revoke_command(
    kid: Annotated[str, typer.Argument(help="The key id to revoke (keys list).")],
    keys_dir: KeysDir = _DEFAULT_DIR,
) -> None:
    """Revoke a key: executors refuse its approvals (E_KEY_REVOKED) once given the new key set.

    Re-export the public key set (keys export-public) to each executor; it needs no restart.
    """
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keys import KeyDirectory

    try:
        KeyDirectory(keys_dir).revoke(kid)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"revoked {kid}; re-export the public key set for executors")


@keys_app.command("list")
def list_command(
    keys_dir: KeysDir = _DEFAULT_DIR,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List key ids with their status."""
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keys import KeyDirectory

    try:
        records = KeyDirectory(keys_dir).records()
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {"kid": r.kid, "status": r.status.value, "created_at": r.created_at}
                    for r in records
                ]
            )
        )
        return
    for r in records:
        typer.echo(f"{r.kid}  {r.status.value:8}  created {r.created_at}")


@keys_app.command("export-public")
def export_public_command(
    keys_dir: KeysDir = _DEFAULT_DIR,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Write here instead of standard output."),
    ] = None,
) -> None:
    """Write the public key set ({"keys": [...]}) the executor trusts."""
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keys import KeyDirectory

    try:
        value = KeyDirectory(keys_dir).public_keyset().to_value()
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    text = json.dumps(value, indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
        return
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, out)
    typer.echo(f"wrote {len(value['keys'])} keys to {out}")
