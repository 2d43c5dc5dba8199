"""``airlock executor …``: the executor's composition root.

Wires settings, the ledger engine, the trusted key set, the receipt key and the Alibaba
adapter into :class:`services.executor.Executor`. Services are imported lazily, inside
each command, so ``airlock --help`` loads no service and no secret
(docs/architecture.md#import-boundaries). ``airlock executor receipts …`` and
``airlock receipts verify`` are in :mod:`airlock.cli._receipts`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._help import Typer
from ._receipts import executor_receipts_app, ledger_engine
from ._text import InertLogFormatter, say

if TYPE_CHECKING:
    from airlock.cloud.ports import CloudReader, CloudWriter
    from airlock.settings import ExecutorSettings
    from services.executor import Executor, Outcome

__all__ = ["executor_app", "show_outcome"]

executor_app = Typer(
    name="executor",
    # Typer's help wins over the callback's docstring, so what a bare `airlock executor`
    # does is said here.
    help=(
        "The executor: verify, consume once, re-read live state, write, receipt.\n\n"
        "Without a command: recovery at start, then the bundle source (a daemon unless "
        "--once); SIGTERM/SIGINT stop it after the item in hand.\n\n"
        "The source is the checkpoint's feed when AIRLOCK_EXECUTOR_CHECKPOINT_URL is set "
        "(with AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN; outcomes are reported back), otherwise "
        "the directory AIRLOCK_EXECUTOR_INBOX.\n\n"
        "Over https the checkpoint's certificate and host name are verified against "
        "certifi's CA bundle, or against exactly the PEM file "
        "AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE when it is set (for a private CA); "
        "SSL_CERT_FILE is not read."
    ),
    invoke_without_command=True,
)
executor_app.add_typer(executor_receipts_app)


def _fail(message: str) -> typer.Exit:
    say(f"error: {message}", err=True)  # often a file's, a database's or a checkpoint's text
    return typer.Exit(2)


def _settings() -> ExecutorSettings:
    from airlock.settings import ExecutorSettings

    from ._settings import load

    return load(ExecutorSettings)


def _cloud(settings: ExecutorSettings) -> tuple[CloudReader, CloudWriter]:
    """The reader and writer of the executor's one provider, with its (write) credentials:
    the executor re-reads live state as the identity that writes."""
    if settings.provider == "aws":
        from airlock.cloud.aws import AwsConfig, AwsReader
        from airlock.cloud.aws.writer import AwsWriter

        aws = AwsConfig.from_settings(settings)
        return AwsReader(aws), AwsWriter(aws)
    from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader
    from airlock.cloud.alibaba.writer import AlibabaWriter

    config = AlibabaConfig.from_settings(settings)
    return AlibabaReader(config), AlibabaWriter(config)


def _build(settings: ExecutorSettings) -> Executor:
    from airlock.cloud.tags import ProductionTags
    from airlock.protocol import Binding
    from airlock.store import Error as StoreError
    from airlock.store import make_engine
    from services.executor import Executor as _Executor
    from services.executor import (
        ExecutorError,
        Failpoints,
        ReceiptDirectorySink,
        ReceiptSigner,
        TrustedKeysFile,
        migrate,
    )

    # Before anything opens a database: a bad directory is one line, nothing to close.
    sink = None
    if settings.receipts_dir is not None:
        try:
            sink = ReceiptDirectorySink(settings.receipts_dir)
        except OSError as exc:
            raise _fail(
                f"AIRLOCK_EXECUTOR_RECEIPTS_DIR: {exc}; create it first "
                f"(mkdir -m 700 {settings.receipts_dir})"
            ) from None
    try:
        # Re-read before every bundle when the file changes (a re-export after a key
        # is revoked takes effect without a restart); parsed now so a bad file stops
        # the start with a clear error.
        keys = TrustedKeysFile(settings.trusted_keys_path)
        keys.current()
        signer = ReceiptSigner.from_file(settings.receipt_key_path)
        failpoints = Failpoints.from_env(os.environ)
        engine = make_engine(settings.database_url)
        migrate(engine)
        reader, writer = _cloud(settings)
    except (OSError, ExecutorError, StoreError, ValueError) as exc:
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
        reader=reader,
        writer=writer,
        signer=signer,
        clock=lambda: int(time.time()),
        lease_seconds=settings.lease_seconds,
        failpoints=failpoints,
        sink=sink,
        production_tags=ProductionTags(settings.prod_tag_keys, settings.prod_value_prefix),
    )


def show_outcome(outcome: Outcome) -> None:
    """Print one outcome as one line: approval id, state or refusal code, detail (escaped)."""
    state = "refused" if outcome.state is None else outcome.state.value
    code = "" if outcome.refusal_code is None else f" {outcome.refusal_code.value}"
    # The detail can quote the cloud provider's answer (a failed write, a re-read).
    say(f"{outcome.approval_id or '-'} {state}{code} {outcome.detail}".rstrip())


def _file_revocations(settings: ExecutorSettings) -> frozenset[str]:
    from services.executor import read_revocations_file

    try:
        return read_revocations_file(settings.revocations_path)
    except OSError as exc:
        raise _fail(str(exc)) from None


@executor_app.callback()
def executor_command(
    ctx: typer.Context,
    once: Annotated[
        bool,
        typer.Option("--once", help="Recover, take what the source has now, report, and exit."),
    ] = False,
) -> None:
    """Run the executor: recovery at start, then the bundle source (daemon unless --once).

    The source is the checkpoint's feed when AIRLOCK_EXECUTOR_CHECKPOINT_URL is set (with
    AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN, an executor service token; outcomes are reported
    back), otherwise the directory AIRLOCK_EXECUTOR_INBOX. Over https the checkpoint's
    certificate is verified against certifi's CA bundle, or against exactly
    AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE when set (SSL_CERT_FILE is not read).
    SIGTERM/SIGINT stop it after the item in hand.
    """
    if ctx.invoked_subcommand is not None:
        return
    # The daemon logs each outcome, whose detail can quote the cloud, and the cloud's
    # errors: escaped (airlock.cli._text).
    log = logging.StreamHandler()
    log.setFormatter(InertLogFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[log])
    # httpx logs every request at INFO: each feed poll would be a line (the feed's own
    # poll line is DEBUG); its warnings and errors still show.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = _settings()
    if settings.checkpoint_url and settings.inbox is not None:
        raise _fail(
            "set either AIRLOCK_EXECUTOR_CHECKPOINT_URL (the checkpoint feed) or "
            "AIRLOCK_EXECUTOR_INBOX (a directory of bundles), not both"
        )
    if not settings.checkpoint_url and settings.inbox is None:
        raise _fail(
            "set AIRLOCK_EXECUTOR_CHECKPOINT_URL (with AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN) to "
            "serve the checkpoint feed, or AIRLOCK_EXECUTOR_INBOX to serve a directory"
        )
    if settings.checkpoint_url and not settings.checkpoint_token.get_secret_value():
        raise _fail("AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN must be set with the checkpoint URL")
    executor = _build(settings)
    try:
        _serve(settings, executor, once=once)
    finally:
        executor.engine.dispose()


_NOT_DELIVERED = (
    "receipts not delivered: the checkpoint's feed did not answer, so this ledger could "
    "not be checked against it yet"
)


def _serve(settings: ExecutorSettings, executor: Executor, *, once: bool) -> None:
    from airlock.tls import CAFileError, checkpoint_verify
    from services.executor import (
        Backoff,
        BundleSource,
        CheckpointFeedSource,
        CheckpointUnauthorized,
        DirectorySource,
        Failpoints,
        Heartbeat,
        LedgerRevocations,
        OutboxReporter,
        Shutdown,
        checkpoint_client,
        serve,
    )
    from services.executor.recover import ledger_checked, run

    shutdown = Shutdown()
    failpoints = Failpoints.from_env(os.environ)  # validated by _build already
    clock = executor.clock
    reporter: OutboxReporter | None = None
    source: BundleSource
    http = outbox_http = None
    if settings.checkpoint_url:
        try:
            verify = checkpoint_verify(settings.checkpoint_ca_file)
        except CAFileError as exc:  # the settings read it; changed since
            raise _fail(f"AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE={exc}") from None
        client = functools.partial(
            checkpoint_client,
            settings.checkpoint_url,
            settings.checkpoint_token.get_secret_value(),
            poll_wait_s=settings.poll_wait,
            verify=verify,
        )
        http = client()
        source = CheckpointFeedSource(
            engine=executor.engine,
            client=http,
            clock=clock,
            backoff=Backoff(cap=settings.retry_max),
            failpoints=failpoints,
            idle=shutdown.idle,
            sleep=shutdown.sleep,
            extra_revoked=_file_revocations(settings),
            ledger_hold_s=settings.max_ttl + settings.skew,
        )
        # Its own client and no idle wait: the daemon delivers on a thread of its own.
        outbox_http = client()
        reporter = OutboxReporter(
            engine=executor.engine,
            client=outbox_http,
            clock=clock,
            backoff=Backoff(cap=settings.retry_max),
            failpoints=failpoints,
            sweep_every_s=settings.recover_every,
        )
    else:
        assert settings.inbox is not None  # checked by the caller
        try:
            source = DirectorySource(
                settings.inbox,
                settings.revocations_path,
                also_revoked=LedgerRevocations(executor.engine),
                sleep=None if once else shutdown.sleep,
            )
        except OSError as exc:
            raise _fail(str(exc)) from None
    try:
        if once:
            for outcome in run(executor, source, once=True):
                show_outcome(outcome)
            if reporter is not None:
                if ledger_checked(source):
                    reporter.flush()
                else:  # as the daemon: no receipt before the ledger is checked (serve)
                    typer.echo(_NOT_DELIVERED, err=True)
            return
        shutdown.install()
        serve(
            executor,
            source,
            shutdown=shutdown,
            reporter=reporter,
            deliver_apart=True,
            parallel=settings.parallel,
            poll_wait_s=settings.poll_wait,
            recover_every_s=settings.recover_every,
            heartbeat=Heartbeat(settings.heartbeat_path),
            error_backoff=Backoff(cap=settings.retry_max),
        )
    except CheckpointUnauthorized as exc:
        raise _fail(str(exc)) from None
    finally:
        if http is not None:
            http.close()
        if outbox_http is not None:
            outbox_http.close()


def _heartbeat_path_setting() -> Path | None:
    """Only the heartbeat path, read (environment or .env) as the executor reads it; in
    dev, unset, the file ``airlock up`` has its executor write."""
    from airlock.settings import DEV_HEARTBEAT_PATH, ServiceSettings, is_dev

    from ._settings import load

    # Defined here, not at the top: ``airlock --help`` must not pay for pydantic-settings.
    class _HeartbeatSetting(ServiceSettings):
        model_config = ServiceSettings.model_config | {"env_prefix": "AIRLOCK_EXECUTOR_"}
        heartbeat_path: Path | None = None

    setting = load(_HeartbeatSetting)
    if setting.heartbeat_path is None and is_dev(setting):
        return DEV_HEARTBEAT_PATH
    return setting.heartbeat_path


@executor_app.command("health")
def health_command(
    max_age: Annotated[
        float,
        typer.Option(
            "--max-age", metavar="SECONDS", help="Seconds since the daemon's last heartbeat.", min=1
        ),
    ] = 120.0,
    path: Annotated[
        Path | None,
        typer.Option(
            "--path",
            metavar="FILE",
            help="Heartbeat file (default AIRLOCK_EXECUTOR_HEARTBEAT_PATH; with AIRLOCK_ENV=dev "
            "and none set, .airlock/executor.heartbeat, the one `airlock up` writes).",
        ),
    ] = None,
) -> None:
    """Exit 0 if the daemon's heartbeat is fresher than --max-age, 1 if not (for health checks).

    Example: airlock executor health --path .airlock/executor.heartbeat
    """
    from services.executor import heartbeat_age

    if path is None:
        # Only the heartbeat path is read (environment or .env, as the executor reads
        # it): a health check must not need valid cloud keys or database settings.
        path = _heartbeat_path_setting()
    if path is None:
        raise _fail(
            "no heartbeat file: pass --path or set AIRLOCK_EXECUTOR_HEARTBEAT_PATH (with "
            "AIRLOCK_ENV=dev it defaults to .airlock/executor.heartbeat, which `airlock up` "
            "writes)"
        )
    age = heartbeat_age(path, time.time())
    if age is None:
        typer.echo(f"unhealthy: no heartbeat at {path}")
        raise typer.Exit(1)
    if age > max_age:
        typer.echo(f"unhealthy: last heartbeat {age:.0f}s ago (max {max_age:.0f}s)")
        raise typer.Exit(1)
    typer.echo(f"healthy: last heartbeat {max(age, 0.0):.1f}s ago")


@executor_app.command("run-bundle")
def run_bundle_command(
    file: Annotated[str, typer.Argument(help="The bundle file, or - for stdin.")],
) -> None:
    """Execute one bundle; exit 0 if it succeeded, 1 if refused/failed/in doubt.

    Exit 2 if it was not run: the file cannot be read, or a ledger hold is in force.

    A hold means this ledger may have forgotten approvals it used: none is consumed yet.
    """
    from services.executor import FileSource, LedgerRevocations, State
    from services.executor.errors import LedgerHeld
    from services.executor.recover import drain

    settings = _settings()
    executor = _build(settings)
    try:
        # Revocations the feed delivered are in the ledger; the file adds local ones.
        revoked = LedgerRevocations(executor.engine, _file_revocations(settings))
        try:
            outcomes = drain(executor, FileSource(file, revoked))
        except (OSError, LedgerHeld) as exc:
            raise _fail(str(exc)) from None
        for outcome in outcomes:
            show_outcome(outcome)
            if outcome.receipt is not None:
                from airlock.protocol import canonical_bytes

                sys.stdout.write(canonical_bytes(outcome.receipt.to_value()).decode() + "\n")
    finally:
        executor.engine.dispose()
    raise typer.Exit(0 if all(o.state is State.SUCCEEDED for o in outcomes) else 1)


@executor_app.command("resolve")
def resolve_command(
    approval_id: Annotated[
        str,
        typer.Argument(
            metavar="ID", help="The in_doubt approval id (apv_…), or its proposal's id (prop_…)."
        ),
    ],
    by: Annotated[
        str, typer.Option("--by", metavar="NAME", help="Who decided (recorded and receipted).")
    ],
    happened: Annotated[
        bool,
        typer.Option(
            "--happened/--did-not-happen", help="Did the write take effect?", show_default=False
        ),
    ],
    note: Annotated[
        str, typer.Option("--note", metavar="TEXT", help="Why (evidence checked).")
    ] = "",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the signed resolution receipt (JSON).")
    ] = False,
) -> None:
    """Record a human decision on an in_doubt row (audited, with a signed receipt).

    The ledger is the truth: resolve here, and its receipt settles the checkpoint's proposal too.

    ID is the apv_ approval id, or the prop_ id of the proposal it approved.

    The receipt is delivered at once to AIRLOCK_EXECUTOR_CHECKPOINT_URL (in dev, up's).

    Prints what was recorded and whether the checkpoint has it; --json prints the receipt.

    If an admin resolved it at the checkpoint already, check the cloud and record the same decision.

    A different one is kept there as a conflict (E_RESOLUTION_CONFLICT); audit reconcile reports it.
    """
    from airlock.protocol import canonical_bytes
    from services.executor import ResolutionError

    settings = _up_checkpoint(_settings())
    executor = _build(settings)
    try:
        try:
            outcome = executor.resolve(approval_id, happened=happened, by=by, note=note)
        except ResolutionError as exc:  # recorded in the audit chain with its code
            raise _fail(f"{exc.code.value}: {exc}") from None
        delivery = _deliver_now(settings, executor, outcome.approval_id or approval_id)
    finally:
        executor.engine.dispose()
    if as_json:
        if outcome.receipt is not None:
            typer.echo(canonical_bytes(outcome.receipt.to_value()).decode())
        return
    decision = "it happened" if happened else "it did not happen"
    say(f"resolved {outcome.approval_id}: {decision} (by {by.strip()})")
    typer.echo(_DELIVERY.get(delivery, _DELIVERY["pending"]).format(id=outcome.approval_id))


#: What ``executor resolve`` says of its receipt's delivery (``_deliver_now``).
_DELIVERY = {
    None: "receipt queued: the executor daemon delivers it to the checkpoint",
    "delivered": "receipt delivered: the checkpoint shows the decision now",
    "rejected": "receipt refused by the checkpoint: airlock executor receipts list {id}",
    "pending": "receipt not delivered yet (see above): the executor daemon delivers it later",
}


#: Where ``airlock up`` keeps the agent's and the executor's service tokens (0600).
_DEV_SERVICE_TOKENS = Path(".airlock/service-tokens.json")


def _up_checkpoint(settings: ExecutorSettings) -> ExecutorSettings:
    """``settings`` with the checkpoint of a running ``airlock up`` filled in: in dev, with
    no AIRLOCK_EXECUTOR_CHECKPOINT_URL set, the checkpoint ``up`` recorded in
    ``.airlock/up.json`` and the executor's token from ``.airlock/service-tokens.json``,
    so ``executor resolve`` on up's state delivers its receipt at once as the daemon
    would. Unchanged outside dev, with a URL set, or with no running ``up`` or token.
    """
    import json

    from pydantic import SecretStr

    from airlock.settings import is_dev, up_ports

    if not is_dev(settings) or settings.checkpoint_url:
        return settings
    port = up_ports().get("checkpoint")
    try:
        token = json.loads(_DEV_SERVICE_TOKENS.read_text()).get("executor")
    except (OSError, ValueError, AttributeError):
        return settings
    if port is None or not isinstance(token, str) or not token:
        return settings
    return settings.model_copy(
        update={"checkpoint_url": f"http://127.0.0.1:{port}", "checkpoint_token": SecretStr(token)}
    )


def _deliver_now(settings: ExecutorSettings, executor: Executor, approval_id: str) -> str | None:
    """Deliver the outbox's receipts now, as the daemon does (``OutboxReporter.flush``),
    the ledger checked against the checkpoint's feed first, as the daemon checks it
    before its first receipt: a restored ledger records its hold and sends nothing.
    The daemon may deliver the same receipt meanwhile: the first delivery record stands
    and the checkpoint answers a receipt it has with the same answer.

    Returns None with no checkpoint configured, else the state of the resolution
    receipt of ``approval_id`` after (``delivered``, ``rejected``, ``pending``…).
    """
    if not settings.checkpoint_url or not settings.checkpoint_token.get_secret_value():
        return None
    from airlock.tls import CAFileError, checkpoint_verify
    from services.executor import (
        Backoff,
        CheckpointFeedSource,
        CheckpointUnauthorized,
        OutboxReporter,
        checkpoint_client,
    )
    from services.executor.recover import check_ledger, ledger_checked
    from services.executor.resend import receipt_history

    try:
        verify = checkpoint_verify(settings.checkpoint_ca_file)
    except CAFileError as exc:  # recorded already: say why it was not sent, not "error"
        say(f"AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE={exc}", err=True)
        return "pending"
    http = checkpoint_client(
        settings.checkpoint_url,
        settings.checkpoint_token.get_secret_value(),
        poll_wait_s=0,
        verify=verify,
    )
    try:
        source = CheckpointFeedSource(
            engine=executor.engine,
            client=http,
            clock=executor.clock,
            ledger_hold_s=settings.max_ttl + settings.skew,
        )
        check_ledger(source)
        if ledger_checked(source):
            OutboxReporter(
                engine=executor.engine, client=http, clock=executor.clock, backoff=Backoff(cap=1)
            ).flush()
    except CheckpointUnauthorized as exc:
        say(str(exc), err=True)
    finally:
        http.close()
    with executor.engine.connect() as conn:
        histories = receipt_history(conn, [approval_id])
    return next((h.state for h in histories if h.kind == "resolution"), "pending")


@executor_app.command("keygen")
def keygen_command(
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Key file (default: the configured path)."),
    ] = None,
    public: Annotated[
        Path | None,
        typer.Option(
            "--public",
            metavar="FILE",
            help="Also write the public key set JSON for verifiers here; - for stdout "
            "(the message then goes to stderr).",
        ),
    ] = None,
) -> None:
    """Create the executor's Ed25519 receipt key (mode 0600; never overwrites).

    Example: airlock executor keygen --public - > receipt-keys.json
    """
    from airlock.protocol import KeySet, canonical_bytes
    from services.executor import generate_receipt_key

    path = out if out is not None else _settings().receipt_key_path
    to_stdout = public is not None and str(public) == "-"
    try:
        signer = generate_receipt_key(path)
        key_set = canonical_bytes(KeySet([signer.trusted_key()]).to_value())
        if to_stdout:
            sys.stdout.buffer.write(key_set + b"\n")
            sys.stdout.flush()
        elif public is not None:
            public.write_bytes(key_set)
    except OSError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"receipt key {signer.keyid} written to {path}", err=to_stdout)


@executor_app.command("migrate")
def migrate_command() -> None:
    """Create or upgrade the ledger database (safe to run from several processes)."""
    ledger_engine().dispose()
    typer.echo("ledger at head")
