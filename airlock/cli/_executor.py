"""``airlock executor …`` and ``airlock receipts verify``: the executor's composition root.

Wires settings, the ledger engine, the trusted key set, the receipt key and the Alibaba
adapter into :class:`services.executor.Executor`. Services are imported lazily, inside
each command, so ``airlock --help`` loads no service and no secret
(docs/architecture.md#import-boundaries). ``airlock executor receipts list|resend`` need only the
ledger database: they show the delivery history of the receipts reported to the checkpoint, queue
rejected ones to be sent again, and, for a checkpoint restored from a backup, delivered ones.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._approvals_show import _when
from ._help import Typer
from ._text import InertLogFormatter, inert, say

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from airlock.settings import ExecutorSettings
    from services.executor import Executor, Outcome, ReceiptHistory

__all__ = ["executor_app", "receipts_app"]

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
receipts_app = Typer(name="receipts", help="Check executor receipts.", no_args_is_help=True)
_RESEND_EXIT_CODES = (
    "Exit codes: 0 queued (with --all-rejected or --delivered-since, also when nothing "
    "matches); 1 refused, nothing queued (every reason is printed); 2 usage or "
    "configuration error."
)
executor_receipts_app = Typer(
    name="receipts",
    help=(
        "The receipts this executor reports to the checkpoint: their delivery history, "
        "sending again those the checkpoint refused for good once the cause is fixed, and "
        "those it accepted once it was restored from a backup.\n\n"
        "Examples:\n\n"
        "  airlock executor receipts list                 # every receipt not delivered\n\n"
        "  airlock executor receipts list apv_...         # one approval's history\n\n"
        "  airlock executor receipts resend apv_... --by alice --note 'receipt key installed'"
        "\n\n"
        "  airlock executor receipts resend --all-rejected --by alice --dry-run\n\n"
        "  airlock executor receipts resend --delivered-since 2026-11-29T06:00:00Z --by alice "
        "--note 'checkpoint restored from the 06:00 backup'"
    ),
    no_args_is_help=True,
)
executor_app.add_typer(executor_receipts_app)


def _fail(message: str) -> typer.Exit:
    say(f"error: {message}", err=True)  # often a file's, a database's or a checkpoint's text
    return typer.Exit(2)


def _settings() -> ExecutorSettings:
    from airlock.settings import ExecutorSettings

    from ._settings import load

    return load(ExecutorSettings)


def _build(settings: ExecutorSettings) -> Executor:
    from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader
    from airlock.cloud.alibaba.writer import AlibabaWriter
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
        config = AlibabaConfig.from_settings(settings)
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
        reader=AlibabaReader(config),
        writer=AlibabaWriter(config),
        signer=signer,
        clock=lambda: int(time.time()),
        lease_seconds=settings.lease_seconds,
        failpoints=failpoints,
        sink=sink,
        production_tags=ProductionTags(settings.prod_tag_keys, settings.prod_value_prefix),
    )


def _show(outcome: Outcome) -> None:
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
    http = None
    if settings.checkpoint_url:
        try:
            verify = checkpoint_verify(settings.checkpoint_ca_file)
        except CAFileError as exc:  # the settings read it; changed since
            raise _fail(f"AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE={exc}") from None
        http = checkpoint_client(
            settings.checkpoint_url,
            settings.checkpoint_token.get_secret_value(),
            poll_wait_s=settings.poll_wait,
            verify=verify,
        )
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
        reporter = OutboxReporter(
            engine=executor.engine,
            client=http,
            clock=clock,
            backoff=Backoff(cap=settings.retry_max),
            failpoints=failpoints,
            idle=shutdown.idle,
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
                _show(outcome)
            if reporter is not None:
                if ledger_checked(source):
                    reporter.flush()
                else:  # as the daemon: no receipt before the ledger is checked (serve)
                    typer.echo(
                        "receipts not delivered: the checkpoint's feed did not answer, so "
                        "this ledger could not be checked against it yet",
                        err=True,
                    )
            return
        shutdown.install()
        serve(
            executor,
            source,
            shutdown=shutdown,
            reporter=reporter,
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
            _show(outcome)
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
    _ledger_engine().dispose()
    typer.echo("ledger at head")


@receipts_app.command("verify")
def receipts_verify_command(
    file: Annotated[Path, typer.Argument(help="A receipt (DSSE envelope JSON).")],
    keys: Annotated[
        Path, typer.Option("--keys", metavar="FILE", help="The executor's receipt key set (JSON).")
    ],
) -> None:
    """Verify a receipt's signature and print what it says; exit 1 if it does not verify.

    Get a proposal's receipt with: airlock approvals show prop_… --receipt apv_….receipt.json

    Example: airlock receipts verify apv_….receipt.json --keys receipt-keys.json

    The audit head it prints is the executor chain's row the receipt vouches for.

    Check it with: airlock audit verify --db EXECUTOR_DB --expect-head SEQ:HASH
    """
    from datetime import UTC, datetime

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
        say(f"FAIL: {exc}")
        raise typer.Exit(1) from None
    at = datetime.fromtimestamp(receipt.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    # A receipt file comes from anyone, and a signed one quotes the cloud (detail).
    say(f"OK: {receipt.outcome} approval {receipt.approval_id}")
    rows = [
        ("executor", receipt.executor),
        ("action", receipt.action_hash),
        (
            "effect",
            None
            if receipt.outcome != "succeeded"
            else "seen in live state after an unknown answer"
            if receipt.verified
            else "the provider accepted the call",
        ),
        (
            "resolution",
            None
            if receipt.resolution is None
            else f"{receipt.resolution.decision} (by {receipt.resolution.by})",
        ),
        ("refusal", receipt.refusal_code),
        ("request", receipt.cloud_request_id),
        ("at", f"{at} ({receipt.at})"),
        ("audit head", f"{receipt.audit_head.seq}:{receipt.audit_head.hash}"),
        ("detail", receipt.detail),
    ]
    for name, value in rows:
        if value:
            say(f"  {name:<11}{value}")


# -- receipts reported to the checkpoint: history and resend ---------------------------------


def _ledger_engine() -> Engine:
    """The ledger database at head: only the database URL of the settings is used."""
    from airlock.store import Error as StoreError
    from airlock.store import make_engine
    from services.executor import migrate

    try:
        engine = make_engine(_settings().database_url)
        migrate(engine)
    except StoreError as exc:
        raise _fail(str(exc)) from None
    return engine


def _approval_ids(approval_ids: list[str] | None) -> list[str]:
    from airlock.protocol import APPROVAL_ID_PATTERN

    ids = list(dict.fromkeys(approval_ids or []))
    malformed = [i for i in ids if not re.fullmatch(APPROVAL_ID_PATTERN, i)]
    if malformed:
        raise _fail(f"not an approval id (apv_…): {inert(malformed[0])[:120]}")
    return ids


#: --delivered-since: RFC 3339 UTC with Z (a fraction of a second is dropped, which moves
#: the bound earlier: more is sent again, never less), or integer Unix seconds.
_RFC3339_UTC = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]{1,9})?Z"
)
_UNIX_SECONDS = re.compile(r"[0-9]{1,11}")


def _since(text: str, now: int) -> int:
    """``--delivered-since`` as Unix seconds; anything else, or a time still to come
    (a mistyped year would send nothing and say so quietly), is a usage error (exit 2)."""
    since: int | None = None
    if _UNIX_SECONDS.fullmatch(text):
        since = int(text)
    elif match := _RFC3339_UTC.fullmatch(text):
        try:
            year, month, day, hour, minute, second = map(int, match.groups())
            at = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
            since = int(at.timestamp())
        except ValueError:
            pass  # not a day of the calendar, or hour 24, second 60
    if since is None:
        raise _fail(
            "--delivered-since takes an RFC 3339 UTC time (2026-11-29T06:00:00Z) or integer "
            f"Unix seconds, not {inert(text)[:60]!r}"
        )
    if since > now:
        raise _fail(f"--delivered-since {_when(since)} is in the future by this host's clock")
    return since


def _history_lines(history: ReceiptHistory) -> list[str]:
    state = {
        "pending": "not attempted yet (queued)",
        "delivered": "delivered",
        "rejected": "rejected (send it again with: airlock executor receipts resend)",
        "resend_pending": "queued again",
    }[history.state]
    if history.approval_unknown:
        state = "rejected: the checkpoint has no such approval (404); " + (
            # An older checkpoint answers a refusal 404 too; after an upgrade, one helps.
            "see below" if history.kind == "refusal" else "a resend to it cannot help"
        )
    elif history.resolution_contested:
        state = (
            "in conflict: the checkpoint kept it and shows the conflict (409)"
            if history.resolution_conflict_kept
            else "refused: the checkpoint holds another decision (409)"
        ) + "; a resend cannot help, see below"
    lines = [f"{history.approval_id} {history.kind}: {state}"]
    events: list[tuple[int, int, str]] = []
    for a in history.attempts:
        answer = " ".join(str(x) for x in (a.http_status, a.error_code) if x is not None)
        detail = f"  {inert(a.detail[:200])}" if a.status == "rejected" and a.detail else ""
        events.append(
            (a.attempt, 1, f"  attempt {a.attempt}  {a.status:<9} {answer}  {_when(a.at)}{detail}")
        )
    for r in history.resends:
        note = f"  note: {inert(r.note)}" if r.note else ""
        follows = history.follows(r)
        # After a delivered attempt: a redelivery, for a checkpoint restored from a backup.
        again = "redelivery " if follows is not None and follows.status == "delivered" else ""
        events.append(
            (
                r.attempt,
                0,
                f"  attempt {r.attempt}  {again}requested by {inert(r.requested_by)}  "
                f"{_when(r.requested_at)}{note}",
            )
        )
    return lines + [line for _, _, line in sorted(events)]


def _approval_unknown_lines(histories: list[ReceiptHistory]) -> list[str]:
    """What a 404 means, said once under the receipts that got one, and what can help
    (services/executor/outbox.py APPROVAL_UNKNOWN; the checkpoint's receipt routes)."""
    lines = [
        "A 404 means the checkpoint verified the receipt and has no such approval; it answers",
        "that receipt so every time it is sent. Either:",
        "  - AIRLOCK_EXECUTOR_CHECKPOINT_URL names another checkpoint than the one that issued",
        "    the approval (any that trusts this executor's receipt key and signs for its audience,",
        "    AIRLOCK_EXECUTOR_AUDIENCE, answers 404 for an approval it did not issue): point the",
        "    executor at the one that issued it, restart it, then resend;",
        "  - or the checkpoint was restored from a backup taken before the approval was issued:",
        "    it will never know that approval, and sending its receipts again cannot change it.",
    ]
    if any(h.kind == "refusal" for h in histories):
        lines.append(
            "  (A refusal receipt also gets 404 from a checkpoint older than POST /v1/refusals: "
            "upgrade it, then resend.)"
        )
    return [
        *lines,
        "Such a receipt stays in this ledger, the source of truth: `airlock executor",
        "receipts list APPROVAL_ID` shows it, and `airlock audit reconcile` counts the",
        "approval among those finished here and not recorded at the checkpoint.",
    ]


def _resolution_contested_lines(histories: list[ReceiptHistory]) -> list[str]:
    """What a 409 for a resolution means, said once under the receipts that got one
    (services/executor/outbox.py resolution_contested)."""
    lines = [
        "A 409 for a resolution means the checkpoint holds another decision for that in_doubt:",
        "a person resolved it there (airlock approvals resolve, or the web app) before this",
        "ledger's resolution arrived, and the two records disagree on what happened (or, for",
        "E_STATE, a checkpoint older than E_RESOLUTION_CONFLICT did not say which). This",
        "ledger is the record of what this executor did and keeps its resolution; the",
        "checkpoint keeps its own state. Sending the receipt again gets the same answer. Check",
        "the resource in the cloud (its state, the provider's record of the call), compare the",
        "proposal at the checkpoint (`airlock approvals show PROPOSAL_ID`; `airlock audit trace",
        f"APPROVAL_ID` finds it) with this ledger's receipt ({len(histories)} listed above), and",
        "tell whoever recorded the wrong decision; `airlock audit reconcile` reports each as",
        "R_RESOLUTION_CONFLICT.",
    ]
    return lines


@executor_receipts_app.command("list")
def receipts_list_command(
    approval_ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="Approval ids to show (default: every receipt not delivered).",
            metavar="APPROVAL_ID",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show receipts' delivery attempts to the checkpoint, and resends asked for.

    With approval ids: each one's receipts (outcome, resolution, refusal), delivered or not.

    Without: every receipt not delivered (rejected, queued again, or not attempted yet).

    For a receipt rejected with 404 (no such approval at the checkpoint) it says what can help.

    So for a resolution answered 409: the checkpoint holds another decision (a person's there).

    Exit codes: 0 shown; 1 a named approval has no receipt here; 2 usage error.
    """
    from airlock.store import read_transaction
    from services.executor import receipt_history, without_receipt

    ids = _approval_ids(approval_ids)
    engine = _ledger_engine()
    try:
        with read_transaction(engine) as conn:
            histories = receipt_history(conn, ids or None)
            missing = without_receipt(conn, ids)
    finally:
        engine.dispose()
    for history in histories:
        for line in _history_lines(history):
            say(line)
    unknown = [h for h in histories if h.approval_unknown]
    if unknown:
        for line in _approval_unknown_lines(unknown):
            typer.echo(line)
    contested = [h for h in histories if h.resolution_contested]
    if contested:
        for line in _resolution_contested_lines(contested):
            say(line)
    if not ids and not histories:
        typer.echo("every receipt was delivered")
    for approval_id, why in missing.items():
        say(f"{approval_id}: {why}", err=True)
    if missing:
        raise typer.Exit(1)


@executor_receipts_app.command("resend", epilog=_RESEND_EXIT_CODES)
def receipts_resend_command(
    approval_ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="Approval ids whose rejected receipts (outcome, resolution, refusal) to send "
            "again, or delivered ones: see the flag below.",
            metavar="APPROVAL_ID",
            show_default=False,
        ),
    ] = None,
    *,
    all_rejected: Annotated[
        bool, typer.Option("--all-rejected", help="Send every rejected receipt again instead.")
    ] = False,
    delivered: Annotated[
        bool,
        typer.Option(
            "--delivered",
            help="Send the named approvals' delivered receipts again instead (a checkpoint "
            "restored from a backup).",
        ),
    ] = False,
    delivered_since: Annotated[
        str | None,
        typer.Option(
            "--delivered-since",
            metavar="TIME",
            help="Send again every receipt last delivered at or after TIME (RFC 3339 UTC "
            "…Z, or Unix seconds), for a checkpoint restored from a backup: a TIME a few "
            "minutes before the backup, by this executor's clock.",
            show_default=False,
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            metavar="NAME",
            help="Who asks (recorded and audited); required unless --dry-run.",
        ),
    ] = None,
    note: Annotated[
        str, typer.Option("--note", metavar="TEXT", help="Why: what was fixed or restored.")
    ] = "",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be queued; change nothing.")
    ] = False,
) -> None:
    """Queue receipts to be delivered to the checkpoint once more, as the same receipt.

    Approval ids, or --all-rejected: receipts the checkpoint refused for good.

    For after the cause is fixed (say the checkpoint now trusts the receipt key).

    --delivered-since TIME, or approval ids with --delivered: receipts it accepted.

    For a checkpoint restored from a backup: pick TIME a few minutes before it was taken.

    Nothing else sends a delivered receipt again; the ledger and receipts never change.

    A resolution goes only after its outcome's new attempt is recorded.

    The request is recorded with --by and --note, and in the audit chain.

    All or nothing: one unknown id, or one with nothing of that kind, refuses it all.

    The running executor delivers it at its next sweep (AIRLOCK_EXECUTOR_RECOVER_EVERY).
    """
    from airlock.store import read_transaction
    from services.executor import (
        ResendRefused,
        check_requester,
        plan_redelivery,
        plan_resend,
        request_redelivery,
        request_resend,
    )

    ids = _approval_ids(approval_ids)
    since = None if delivered_since is None else _since(delivered_since, int(time.time()))
    if sum((all_rejected, bool(ids), since is not None)) != 1:
        raise _fail(
            "name the approval ids to send again, or pass --all-rejected or "
            "--delivered-since TIME (one of them)"
        )
    if delivered and not ids:
        raise _fail("--delivered goes with approval ids; for a time, --delivered-since TIME")
    if by is None and not dry_run:
        raise _fail("--by NAME is required: who asks for a resend is recorded and audited")
    try:
        who = check_requester("-" if by is None else by, note)
    except ResendRefused as exc:
        raise _fail(str(exc)) from None
    redelivery = delivered or since is not None
    engine = _ledger_engine()
    try:
        if dry_run:
            with read_transaction(engine) as conn:
                plan = (
                    plan_redelivery(conn, ids or None, since=since)
                    if redelivery
                    else plan_resend(conn, ids or None)
                )
        elif redelivery:
            plan = request_redelivery(
                engine, ids or None, since=since, by=who, note=note, now=int(time.time())
            )
        else:
            plan = request_resend(engine, ids or None, by=who, note=note, now=int(time.time()))
    except ResendRefused as exc:
        for subject, why in exc.problems:
            say(f"refused ({exc.code.value}): {subject}: {why}", err=True)
        typer.echo("nothing queued" + ("" if dry_run else "; the refusal is audited"), err=True)
        raise typer.Exit(1) from None
    finally:
        engine.dispose()
    if not plan:
        typer.echo(
            "no rejected receipt: nothing to send again"
            if since is None
            else f"no receipt delivered since {_when(since)}: nothing to send again"
        )
        return
    verb = "would queue" if dry_run else "queued"
    if since is not None:
        typer.echo(f"receipts last delivered at or after {_when(since)}, by this host's clock:")
    for r in plan:
        say(
            f"{verb} the {r.kind} receipt of {r.approval_id} as attempt {r.attempt} "
            f"(after {r.follows.describe()})"
        )
    if redelivery:
        typer.echo(
            "a receipt the checkpoint still has is answered as before; one for an approval "
            "it lost is refused and recorded rejected"
        )
    if not dry_run:
        typer.echo(
            "the executor delivers them at its next sweep; "
            "see `airlock executor receipts list APPROVAL_ID`"
        )
