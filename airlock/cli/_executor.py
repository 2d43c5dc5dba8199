"""``airlock executor …`` and ``airlock receipts verify``: the executor's composition root.

Wires settings, the ledger engine, the trusted key set, the receipt key and the Alibaba
adapter into :class:`services.executor.Executor`. Services are imported lazily, inside
each command, so ``airlock --help`` loads no service and no secret (DESIGN §1).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from airlock.settings import ExecutorSettings
    from services.executor import Executor, Outcome

__all__ = ["executor_app", "receipts_app"]

executor_app = typer.Typer(
    name="executor",
    help="The executor: verify, consume once, re-read live state, write, receipt.",
    invoke_without_command=True,
)
receipts_app = typer.Typer(name="receipts", help="Check executor receipts.", no_args_is_help=True)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _settings() -> ExecutorSettings:
    from pydantic import ValidationError

    from airlock.settings import ExecutorSettings

    try:
        return ExecutorSettings()
    except ValidationError as exc:
        raise _fail(f"executor settings: {exc.errors()[0]['msg']}") from None


def _build(settings: ExecutorSettings) -> Executor:
    from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader, AlibabaWriter
    from airlock.protocol import Binding, KeySet, KeySetError
    from airlock.store import Error as StoreError
    from airlock.store import make_engine
    from services.executor import Executor as _Executor
    from services.executor import (
        ExecutorError,
        Failpoints,
        ReceiptDirectorySink,
        ReceiptSigner,
        migrate,
    )

    try:
        keys = KeySet.from_json_bytes(settings.trusted_keys_path.read_bytes())
        signer = ReceiptSigner.from_file(settings.receipt_key_path)
        failpoints = Failpoints.from_env(os.environ)
        engine = make_engine(settings.database_url)
        migrate(engine)
        config = AlibabaConfig.from_settings(settings)
    except (OSError, KeySetError, ExecutorError, StoreError, ValueError) as exc:
        raise _fail(str(exc)) from None
    return _Executor(
        engine=engine,
        keys=keys,
        binding=Binding(
            settings.audience,
            settings.provider,
            settings.account_or_default(),
            settings.region,
            max_ttl=settings.max_ttl,
            skew=settings.skew,
        ),
        reader=AlibabaReader(config),
        writer=AlibabaWriter(config),
        signer=signer,
        clock=lambda: int(time.time()),
        lease_seconds=settings.lease_seconds,
        failpoints=failpoints,
        sink=None if settings.receipts_dir is None else ReceiptDirectorySink(settings.receipts_dir),
    )


def _show(outcome: Outcome) -> None:
    state = "refused" if outcome.state is None else outcome.state.value
    code = "" if outcome.refusal_code is None else f" {outcome.refusal_code.value}"
    typer.echo(f"{outcome.approval_id or '-'} {state}{code} {outcome.detail}".rstrip())


@executor_app.callback()
def executor_command(
    ctx: typer.Context,
    once: Annotated[
        bool, typer.Option("--once", help="Recover, drain the inbox once, and exit.")
    ] = False,
) -> None:
    """Run the executor: recovery at start, then the bundle source (daemon unless --once)."""
    if ctx.invoked_subcommand is not None:
        return
    import threading

    from services.executor import DirectorySource
    from services.executor.recover import run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = _settings()
    if settings.inbox is None:
        raise _fail("set AIRLOCK_EXECUTOR_INBOX (a directory of bundles) to run the executor")
    try:
        source = DirectorySource(settings.inbox, settings.revocations_path)
    except OSError as exc:
        raise _fail(str(exc)) from None
    executor = _build(settings)
    stop = threading.Event()
    try:
        for outcome in run(
            executor,
            source,
            once=once,
            recover_every_s=settings.recover_every,
            poll_wait_s=settings.poll_wait,
            stop=stop,
        ):
            _show(outcome)
    except KeyboardInterrupt:
        stop.set()
    finally:
        executor.engine.dispose()


@executor_app.command("run-bundle")
def run_bundle_command(
    file: Annotated[str, typer.Argument(help="The bundle file, or - for stdin.")],
) -> None:
    """Execute one bundle; exit 0 if it succeeded, 1 if refused/failed/in doubt."""
    from services.executor import FileSource, State
    from services.executor.recover import drain

    settings = _settings()
    executor = _build(settings)
    try:
        revoked: frozenset[str] = frozenset()
        if settings.revocations_path is not None and settings.revocations_path.exists():
            lines = settings.revocations_path.read_text(encoding="utf-8").splitlines()
            revoked = frozenset(line.strip() for line in lines if line.strip())
        try:
            outcomes = drain(executor, FileSource(file, revoked))
        except OSError as exc:
            raise _fail(str(exc)) from None
        for outcome in outcomes:
            _show(outcome)
            if outcome.receipt is not None:
                from airlock.protocol import canonical_bytes

                sys.stdout.write(canonical_bytes(outcome.receipt.to_value()).decode() + "\n")
    finally:
        executor.engine.dispose()
    raise typer.Exit(0 if all(o.state is State.SUCCEEDED for o in outcomes) else 1)


@executor_app.command("resolve")
def resolve_command(
    approval_id: Annotated[str, typer.Argument(help="The in_doubt approval id.")],
    by: Annotated[str, typer.Option("--by", help="Who decided (recorded and receipted).")],
    happened: Annotated[
        bool,
        typer.Option(
            "--happened/--did-not-happen", help="Did the write take effect?", show_default=False
        ),
    ],
    note: Annotated[str, typer.Option("--note", help="Why (evidence checked).")] = "",
) -> None:
    """Record a human decision on an in_doubt row (audited, with a signed receipt)."""
    from airlock.protocol import canonical_bytes
    from services.executor import ResolutionError

    executor = _build(_settings())
    try:
        outcome = executor.resolve(approval_id, happened=happened, by=by, note=note)
    except ResolutionError as exc:
        raise _fail(str(exc)) from None
    finally:
        executor.engine.dispose()
    _show(outcome)
    if outcome.receipt is not None:
        typer.echo(canonical_bytes(outcome.receipt.to_value()).decode())


@executor_app.command("keygen")
def keygen_command(
    out: Annotated[
        Path | None, typer.Option("--out", help="Key file (default: the configured path).")
    ] = None,
    public: Annotated[
        Path | None,
        typer.Option("--public", help="Also write the public key set JSON for verifiers here."),
    ] = None,
) -> None:
    """Create the executor's Ed25519 receipt key (mode 0600; never overwrites)."""
    from airlock.protocol import KeySet, canonical_bytes
    from services.executor import generate_receipt_key

    path = out if out is not None else _settings().receipt_key_path
    try:
        signer = generate_receipt_key(path)
        if public is not None:
            public.write_bytes(canonical_bytes(KeySet([signer.trusted_key()]).to_value()))
    except OSError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"receipt key {signer.keyid} written to {path}")


@executor_app.command("migrate")
def migrate_command() -> None:
    """Create or upgrade the ledger database (safe to run from several processes)."""
    from airlock.store import Error as StoreError
    from airlock.store import make_engine
    from services.executor import migrate

    try:
        engine = make_engine(_settings().database_url)
        migrate(engine)
    except StoreError as exc:
        raise _fail(str(exc)) from None
    engine.dispose()
    typer.echo("ledger at head")


@receipts_app.command("verify")
def receipts_verify_command(
    file: Annotated[Path, typer.Argument(help="A receipt (DSSE envelope JSON).")],
    keys: Annotated[Path, typer.Option("--keys", help="The executor's receipt key set (JSON).")],
) -> None:
    """Verify a receipt's signature and print what it says; exit 1 if it does not verify."""
    from airlock.protocol import KeySet, KeySetError
    from services.executor import InvalidReceipt, verify_receipt

    try:
        keyset = KeySet.from_json_bytes(keys.read_bytes())
        data = file.read_bytes()
    except (OSError, KeySetError) as exc:
        raise _fail(str(exc)) from None
    try:
        receipt = verify_receipt(data.strip(), keyset, int(time.time()))
    except InvalidReceipt as exc:
        typer.echo(f"FAIL: {exc}")
        raise typer.Exit(1) from None
    typer.echo(
        f"OK: {receipt.outcome} approval {receipt.approval_id} action {receipt.action_hash} "
        f"refusal {receipt.refusal_code} request {receipt.cloud_request_id} at {receipt.at} "
        f"audit head {receipt.audit_head.seq}:{receipt.audit_head.hash}"
    )
