"""``airlock keys generate|stage|rotate|revoke|list|export-public``: the checkpoint's keys.

The key directory is the checkpoint's (``AIRLOCK_CHECKPOINT_KEYS_DIR``). Private keys are
written mode 0600 and never printed; ``export-public`` writes the key set the executor
trusts. A rotation has two phases: ``stage`` makes the next key, which executors can be
given (``export-public``) before ``rotate`` makes it the one that signs; ``rotate --now``
skips that, and says what it costs. ``stage``, ``rotate`` and ``revoke`` are recorded in
the checkpoint's audit chain, so they need its database
(``AIRLOCK_CHECKPOINT_DATABASE_URL``) and refuse to change a key without it. The
checkpoint service is imported inside each command (docs/architecture.md#import-boundaries).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._help import Typer

if TYPE_CHECKING:
    from services.checkpoint import Database

__all__ = ["keys_app", "public_keyset_text", "replace_file"]

keys_app = Typer(
    name="keys",
    help="The checkpoint's Ed25519 signing keys: generate, stage, rotate, revoke, list, export.",
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


def _audited() -> tuple[Database, int]:
    """The checkpoint's database (migrated) and its execution window, or exit 2: a key
    change nobody can prove afterwards is not made."""
    from airlock.settings import CheckpointSettings
    from airlock.store import Error as StoreError
    from airlock.store import upgrade
    from services.checkpoint import MIGRATIONS, Database

    why = "a key change is recorded in the checkpoint's audit chain, which needs its database"
    try:
        settings = CheckpointSettings()
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise _fail(f"{why}: {exc}") from None
    try:
        db = Database(settings.database_url)
        upgrade(db.engine, MIGRATIONS)
    except StoreError as exc:
        raise _fail(f"{why}: checkpoint database: {exc}") from None
    return db, settings.execution_window


@keys_app.command("generate")
def generate_command(keys_dir: KeysDir = _DEFAULT_DIR) -> None:
    """Create the first signing key (refused if a key set exists: use stage, then rotate)."""
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keys import KeyDirectory

    try:
        record = KeyDirectory(keys_dir).generate(int(time.time()))
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"generated {record.kid} (active) in {keys_dir}")


@keys_app.command("stage")
def stage_command(keys_dir: KeysDir = _DEFAULT_DIR) -> None:
    """Make the next signing key (status next): exported for executors, it signs nothing yet.

    Give every executor the new public key set (keys export-public), then run keys rotate.

    Under airlock up, the executor is given it at once.

    Recorded in the checkpoint's audit chain: needs AIRLOCK_CHECKPOINT_DATABASE_URL.
    """
    from airlock.store import Error as StoreError
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keyaudit import ChainKeyAudit
    from services.checkpoint.keys import KeyDirectory

    db, _ = _audited()
    try:
        now = int(time.time())
        record = KeyDirectory(keys_dir).stage(now, audit=ChainKeyAudit(db, lambda: now))
    except (ConfigError, StoreError) as exc:
        raise _fail(str(exc)) from None
    finally:
        db.dispose()
    typer.echo(
        f"staged {record.kid} (next): it signs nothing yet. Give every executor the new "
        "public key set (airlock keys export-public --out FILE), then run airlock keys rotate"
    )


@keys_app.command("rotate")
def rotate_command(
    keys_dir: KeysDir = _DEFAULT_DIR,
    at_once: Annotated[
        bool,
        typer.Option(
            "--now",
            help="No staged key: make a new key active at once. Executors refuse its "
            "approvals (E_UNKNOWN_KEY) until they have the new key set.",
        ),
    ] = False,
) -> None:
    """Make the staged key (keys stage) active; the old one is retired, its private key deleted.

    No staged key: refused, unless --now (executors without the new key set refuse its approvals).

    A retired key verifies approvals in flight until not_after (now + execution window + 30 s).

    Recorded in the checkpoint's audit chain: needs AIRLOCK_CHECKPOINT_DATABASE_URL.
    """
    from airlock.store import Error as StoreError
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keyaudit import ChainKeyAudit
    from services.checkpoint.keys import KeyDirectory

    db, window = _audited()
    try:
        now = int(time.time())
        audit = ChainKeyAudit(db, lambda: now)
        record = KeyDirectory(keys_dir).rotate(
            now, execution_window=window, audit=audit, immediate=at_once
        )
    except (ConfigError, StoreError) as exc:
        raise _fail(str(exc)) from None
    finally:
        db.dispose()
    if at_once:
        typer.echo(
            f"keys: warning: {record.kid} signs from the checkpoint's next approval, and "
            "every executor refuses it (E_UNKNOWN_KEY) until it has the new key set: "
            "install airlock keys export-public at each executor now",
            err=True,
        )
        typer.echo(f"rotated: {record.kid} is active (made now)")
        return
    typer.echo(
        f"rotated: {record.kid}, staged before, is active. Re-export the public key set "
        "for executors, so that they retire the old key at its not_after"
    )


@keys_app.command("revoke")
def revoke_command(
    kid: Annotated[str, typer.Argument(help="The key id to revoke (keys list).")],
    keys_dir: KeysDir = _DEFAULT_DIR,
) -> None:
    """Revoke a key: executors refuse its approvals (E_KEY_REVOKED) once given the new key set.

    Re-export the public key set (keys export-public) to each executor; it needs no restart.

    Its private key is deleted.

    Recorded in the checkpoint's audit chain: needs AIRLOCK_CHECKPOINT_DATABASE_URL.
    """
    from airlock.store import Error as StoreError
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keyaudit import ChainKeyAudit
    from services.checkpoint.keys import KeyDirectory

    db, _ = _audited()
    try:
        KeyDirectory(keys_dir).revoke(kid, audit=ChainKeyAudit(db, lambda: int(time.time())))
    except (ConfigError, StoreError) as exc:
        raise _fail(str(exc)) from None
    finally:
        db.dispose()
    typer.echo(f"revoked {kid}; re-export the public key set for executors")


@keys_app.command("list")
def list_command(
    keys_dir: KeysDir = _DEFAULT_DIR,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List key ids with their status and a retired key's not_after (trusted until then).

    A staged key (keys stage) is listed as next: executors may trust it; it signs nothing yet.

    Warns of a retired key with no not_after, or a private key left that nothing signs with.
    """
    from services.checkpoint.errors import ConfigError
    from services.checkpoint.keys import KeyDirectory

    directory = KeyDirectory(keys_dir)
    try:
        records = directory.records()
        warnings = directory.warnings()
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    for warning in warnings:
        typer.echo(f"keys: warning: {warning}", err=True)
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "kid": r.kid,
                        "status": r.status.value,
                        "created_at": r.created_at,
                        "not_after": r.not_after,
                    }
                    for r in records
                ]
            )
        )
        return
    for r in records:
        until = "" if r.not_after is None else f"  not_after {_iso(r.not_after)}"
        unbounded = "  not_after NONE (trusted for ever: revoke it)" if r.unbounded else ""
        staged = "  (staged: keys rotate makes it active)" if r.status.value == "next" else ""
        created = _iso(r.created_at)
        typer.echo(f"{r.kid}  {r.status.value:8}  created {created}{until}{unbounded}{staged}")


def _iso(unix: int) -> str:
    """Unix seconds as ISO 8601 UTC (``2026-12-04T16:43:48Z``); --json keeps the number."""
    try:
        return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):  # out of datetime's range: say it raw
        return f"{unix} (Unix seconds)"


def public_keyset_text(keys_dir: Path) -> str:
    """The public key set of ``keys_dir`` as ``export-public`` writes it; raises the
    checkpoint's ConfigError for a key set that is missing or malformed."""
    from services.checkpoint.keys import KeyDirectory

    return json.dumps(KeyDirectory(keys_dir).public_keyset().to_value(), indent=2) + "\n"


def replace_file(out: Path, data: bytes) -> None:
    """Write ``out`` whole or not at all: a new file beside it, flushed, then renamed over
    it, so a reader (the executor re-reads its trusted key set when the file changes)
    sees the old key set or the new one, never a part. Mode 0644 less the umask, as a
    plain write would be, but never group- or other-writable."""
    tmp = out.with_name(f".{out.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    # The rename itself durable: after a power loss the executor must not find the key
    # set from before a revocation.
    dir_fd = os.open(out.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@keys_app.command("export-public")
def export_public_command(
    keys_dir: KeysDir = _DEFAULT_DIR,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Write here instead of standard output."),
    ] = None,
) -> None:
    """Write the public key set ({"keys": [...]}) the executor trusts, staged key included.

    --out replaces the file whole (renamed over it); a running executor reads it at its next bundle.
    """
    from services.checkpoint.errors import ConfigError

    try:
        text = public_keyset_text(keys_dir)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        replace_file(out, text.encode())
    except OSError as exc:
        raise _fail(f"{out}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {len(json.loads(text)['keys'])} keys to {out}")
