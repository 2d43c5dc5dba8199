"""``airlock gate``: operate a gate (:mod:`airlock.gate`) — its ledger, recovery, keys.

A gate runs inside the team's own program; these commands are for the person who runs
that program: what its ledger holds, settling calls a crash interrupted, deciding an
``in_doubt``, and the keys (the checkpoint's, pinned; the gate's own receipt key).
Every command but ``keys`` reads the gate's ``AIRLOCK_GATE_*`` settings (docs/gate.md).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from ._help import Typer
from ._text import say

if TYPE_CHECKING:
    from airlock.gate import Gate
    from airlock.protocol import KeySet

__all__ = ["gate_app"]

gate_app = Typer(
    name="gate",
    help="Operate a gate (airlock.gate): its ledger, recovery, in_doubt calls, keys.",
    no_args_is_help=True,
)
keys_app = Typer(
    name="keys",
    help="Pin the checkpoint's key set; create the gate's own receipt key.",
    no_args_is_help=True,
)
gate_app.add_typer(keys_app)

#: Where ``keys fetch`` pins the checkpoint's key set when AIRLOCK_GATE_KEYS is unset.
DEFAULT_PINNED: Final = Path(".airlock/gate-trusted-keys.json")
_DEFAULT_RECEIPT_KEY: Final = Path(".airlock/gate-receipt.pem")


def _fail(message: str) -> typer.Exit:
    say(f"error: {message}", err=True)
    return typer.Exit(1)


def _gate() -> Gate:
    from airlock.gate import ConfigError, Gate

    try:
        return Gate.from_env()
    except ConfigError as exc:
        raise _fail(str(exc)) from None


@gate_app.command("status")
def status_command() -> None:
    """The gate's ledger: calls per state, receipts not yet delivered, and each in_doubt.

    Exit code 0; 3 when a call is in_doubt (a person must resolve it).
    """
    import sqlalchemy as sa

    from airlock import ledger

    gate = _gate()
    try:
        found = gate.status()
        with gate.engine.connect() as conn:
            doubts = conn.execute(
                sa.select(
                    ledger.ledger.c.approval_id,
                    ledger.ledger.c.operation,
                    ledger.ledger.c.resource_id,
                    ledger.ledger.c.effect_key,
                )
                .where(
                    ledger.ledger.c.state == ledger.State.IN_DOUBT.value,
                    ledger.ledger.c.resource_type == ledger.TOOL_CALL_RESOURCE_TYPE,
                    ~sa.exists().where(
                        ledger.resolutions.c.approval_id == ledger.ledger.c.approval_id
                    ),
                )
                .order_by(ledger.ledger.c.claimed_at)
            ).all()
    finally:
        gate.close()
    counts = ", ".join(f"{state} {n}" for state, n in sorted(found.states.items())) or "empty"
    say(f"ledger: {counts}")
    say(f"receipts not yet delivered: {found.undelivered}")
    for approval_id, tool, target, effect_key in doubts:
        say(f"in_doubt: {approval_id}  {tool} on {target}  ({effect_key})")
    if doubts:
        say("resolve each with: airlock gate resolve APPROVAL_ID --happened|--did-not-happen")
        raise typer.Exit(3)


@gate_app.command("recover")
def recover_command(
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Rows per run.")] = 100,
) -> None:
    """Settle calls whose process stopped, and send undelivered receipts; never calls.

    A call that never started is refused E_INTERRUPTED.

    One that may have run is in_doubt: this command has no lookup of the program's.
    """
    gate = _gate()
    try:
        settled = gate.recover(limit=limit)
    finally:
        gate.close()
    for row in settled:
        code = f" {row.code}" if row.code else ""
        say(f"{row.approval_id}: {row.state}{code}  ({row.effect_key or '-'})")
    say(f"settled {len(settled)}")


@gate_app.command("resolve")
def resolve_command(
    approval_id: Annotated[str, typer.Argument(help="The in_doubt call's approval id.")],
    happened: Annotated[
        bool | None,
        typer.Option(
            "--happened/--did-not-happen",
            help="What you found in the system the function writes to.",
            show_default=False,
        ),
    ] = None,
    by: Annotated[
        str | None, typer.Option(help="Who decides (default: $USER).", show_default=False)
    ] = None,
    note: Annotated[str, typer.Option(help="What you checked.")] = "",
) -> None:
    """Record a person's decision on an in_doubt call, with a signed receipt."""
    from airlock.gate import Refused

    if happened is None:
        raise _fail("E_INVALID: say --happened or --did-not-happen")
    who = by or os.environ.get("USER") or ""
    gate = _gate()
    try:
        gate.resolve(approval_id, "happened" if happened else "did_not_happen", who, note)
    except Refused as exc:
        raise _fail(f"{exc.code}: {exc.detail}") from None
    finally:
        gate.close()
    say(f"{approval_id}: resolved {'happened' if happened else 'did_not_happen'} by {who}")


# -- keys --------------------------------------------------------------------------------


def _key_lines(keys: KeySet) -> list[str]:
    return [f"  {kid}  {key.status.value}" for kid, key in keys.items()]


@keys_app.command("fetch")
def keys_fetch_command(
    checkpoint: Annotated[
        str | None,
        typer.Option(
            help="The checkpoint's URL (default: $AIRLOCK_GATE_CHECKPOINT_URL).",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help=f"Where to pin it (default: $AIRLOCK_GATE_KEYS, else {DEFAULT_PINNED}).",
            show_default=False,
        ),
    ] = None,
    expect: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KID",
            help="A key id you got from the checkpoint's operator; refuse a set without it.",
        ),
    ] = None,
    replace: Annotated[
        bool, typer.Option(help="Replace a pinned set that differs (after a key rotation).")
    ] = False,
) -> None:
    """Fetch the checkpoint's public key set (GET /v1/keys) and pin it in a file.

    The gate trusts only the pinned file.

    Compare the key ids printed with `airlock keys list` at the checkpoint, or use --expect.
    """
    from airlock.apiclient import ApiError, checkpoint_http, exchange
    from airlock.protocol import KeySet, KeySetError, KeyStatus, canonical_bytes
    from airlock.tls import checkpoint_verify

    url = checkpoint or os.environ.get("AIRLOCK_GATE_CHECKPOINT_URL", "")
    if not url:
        raise _fail("E_CONFIG: give --checkpoint URL or set AIRLOCK_GATE_CHECKPOINT_URL")
    path = out or Path(os.environ.get("AIRLOCK_GATE_KEYS") or DEFAULT_PINNED)
    ca = os.environ.get("AIRLOCK_GATE_CA_FILE")
    try:
        verify = checkpoint_verify(Path(ca)) if ca else True
        with checkpoint_http(url, verify=verify, timeout=10.0) as http:
            answer = exchange(http, "GET", "/v1/keys", deadline_s=15.0, max_bytes=1 << 20)
    except (ApiError, OSError, ValueError) as exc:
        raise _fail(f"E_UNAVAILABLE: {url}: {exc}") from None
    if not answer.ok:
        raise _fail(f"E_UNAVAILABLE: {url}/v1/keys answered {answer.status}")
    try:
        keys = KeySet.from_json_bytes(answer.body)
    except KeySetError as exc:
        raise _fail(f"E_KEYS: {url}/v1/keys is not a key set: {exc}") from None
    active = {kid for kid, key in keys.items() if key.status is KeyStatus.ACTIVE}
    missing = sorted(set(expect or ()) - active)
    if missing:
        raise _fail(f"E_KEY_MISMATCH: the checkpoint's active keys lack {', '.join(missing)}")
    data = canonical_bytes(keys.to_value())
    if path.exists() and path.read_bytes() != data and not replace:
        raise _fail(f"E_PINNED: {path} pins another key set; check it, then use --replace")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    say(f"pinned {len(keys)} key(s) from {url} in {path}:")
    for line in _key_lines(keys):
        say(line)


@keys_app.command("init")
def keys_init_command(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help=f"Key file (default: $AIRLOCK_GATE_RECEIPT_KEY, else {_DEFAULT_RECEIPT_KEY}).",
            show_default=False,
        ),
    ] = None,
    public: Annotated[
        Path | None,
        typer.Option(
            "--public", metavar="FILE", help="Also write its public key set here; - for stdout."
        ),
    ] = None,
    register: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Add the public key under --audience to a checkpoint's gate key file "
            "(AIRLOCK_CHECKPOINT_GATE_KEYS).",
        ),
    ] = None,
    audience: Annotated[
        str | None,
        typer.Option(
            help="The gate's audience (default: $AIRLOCK_GATE_AUDIENCE).", show_default=False
        ),
    ] = None,
) -> None:
    """Create the gate's Ed25519 receipt key (mode 0600); an existing key is kept.

    Example: airlock gate keys init --register .airlock/gate-keys.json --audience refunds
    """
    from airlock.gate import ConfigError, ReceiptSigner, generate_receipt_key
    from airlock.protocol import KeySet, KeySetError, canonical_bytes

    path = out or Path(os.environ.get("AIRLOCK_GATE_RECEIPT_KEY") or _DEFAULT_RECEIPT_KEY)
    try:
        if path.exists():
            signer = ReceiptSigner.from_file(path)
            made = "kept"
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            signer = generate_receipt_key(path)
            made = "created"
    except (ConfigError, OSError) as exc:
        raise _fail(str(exc)) from None
    key_set = canonical_bytes(signer.key_set().to_value())
    to_stdout = public is not None and str(public) == "-"
    if to_stdout:
        sys.stdout.buffer.write(key_set + b"\n")
        sys.stdout.flush()
    elif public is not None:
        public.write_bytes(key_set)
    say(f"receipt key {signer.keyid} {made} at {path}", err=to_stdout)
    if register is None:
        return
    name = audience or os.environ.get("AIRLOCK_GATE_AUDIENCE", "")
    if not name:
        raise _fail("E_CONFIG: --register needs --audience or AIRLOCK_GATE_AUDIENCE")
    try:
        value = json.loads(register.read_bytes()) if register.exists() else {}
        if not isinstance(value, dict):
            raise ValueError("not a JSON object of audience to key set")
        mine = signer.key_set().to_value()
        if name in value:
            merged = KeySet.from_value(value[name]).to_value()
            known = {key["kid"] for key in merged["keys"]}
            merged["keys"] += [k for k in mine["keys"] if k["kid"] not in known]
            value[name] = merged
        else:
            value[name] = mine
    except (OSError, ValueError, KeySetError) as exc:
        raise _fail(f"E_KEYS: {register}: {exc}") from None
    tmp = register.with_name(register.name + ".tmp")
    tmp.write_bytes(canonical_bytes(value))
    tmp.replace(register)
    say(f"registered {signer.keyid} for audience {name} in {register}", err=to_stdout)
