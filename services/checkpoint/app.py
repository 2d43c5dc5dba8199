"""Building the checkpoint: from settings to a running FastAPI app with its sweeper.

:func:`build` refuses to produce an app when anything the checkpoint needs is wrong — a
malformed policy, a signing key file others can read, no active key, a missing or
malformed executor receipt key set, an unreachable database — with a
:class:`ConfigError` that names the file or setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi
from prometheus_client import Counter, Gauge
from sqlalchemy.pool import ConnectionPoolEntry

from airlock.asgi import LOOPBACK_HOSTS
from airlock.protocol import KeySet, KeySetError
from airlock.settings import CheckpointSettings, answered_hosts
from airlock.store import upgrade

from . import prefs
from ._db import MIGRATIONS, Database
from .auth import Accounts
from .errors import ConfigError, ErrorCode
from .gatekeys import GateKeys
from .keys import KeyDirectory, KeyRing
from .limits import RefusalBudgets
from .notify import Dispatcher, OutboxStats, Sender, open_channels
from .notify.outbox import WAKE
from .policy import load_policy
from .refusals import RefusalRecorder
from .routes import Metrics, guard, install, mount
from .service import Checkpoint, CheckpointConfig
from .wake import FEED, LIMITS, FeedSignal, Listener

__all__ = [
    "DEFAULT_POLICY",
    "MIGRATIONS",
    "RefusalLimits",
    "bare_app",
    "build",
    "create_app",
    "openapi_schema",
]

DEFAULT_POLICY: Final = Path(__file__).with_name("default-policy.toml")
API_VERSION: Final = "1"
_log = logging.getLogger("airlock.checkpoint")


def _system_now() -> int:
    return int(time.time())


def build(
    settings: CheckpointSettings,
    *,
    now: Callable[[], int] = _system_now,
    sweep_interval: float | None = 15.0,
) -> FastAPI:
    """Check everything, migrate the database, and return the app (or raise ConfigError)."""
    policy = load_policy(settings.policy_path or DEFAULT_POLICY)
    keys = KeyRing(KeyDirectory(settings.keys_dir))
    receipt_keys = _receipt_keys(settings.receipt_keys_path)
    # Named explicitly, the file must be there; the dev default only when it is.
    gate_keys = GateKeys(settings.gate_keys, required="gate_keys" in settings.model_fields_set)
    senders = open_channels(policy.notify)  # every secret file read now, or refused
    db = Database(settings.database_url)
    upgrade(db.engine, MIGRATIONS)
    signal = FeedSignal()
    checkpoint = Checkpoint(
        db,
        policy,
        keys,
        CheckpointConfig(
            audience=settings.audience,
            approval_window=settings.approval_window,
            execution_window=settings.execution_window,
        ),
        now=now,
        receipt_keys=receipt_keys,
        gate_keys=gate_keys,
        on_change=signal.bump,
    )
    accounts = Accounts(
        db,
        now,
        session_ttl=settings.session_ttl,
        session_idle=settings.session_idle,
        lockout_threshold=settings.lockout_threshold,
        lockout_seconds=settings.lockout_seconds,
    )
    return create_app(
        checkpoint,
        accounts,
        signal=signal,
        feed_max_wait=settings.feed_max_wait,
        sweep_interval=sweep_interval,
        refusal_limits=RefusalLimits(
            interval=settings.refusal_interval,
            burst=settings.refusal_burst,
            per_minute=settings.refusals_per_minute,
        ),
        allowed_hosts=answered_hosts(settings.allowed_hosts, settings.host),
        trusted_proxies=settings.trusted_proxies,
        notify_senders=senders,
    )


def _receipt_keys(path: Path | None) -> KeySet:
    # Mandatory: an outcome moves a proposal to a final state and frees its target, so one
    # that is not signed by the executor's receipt key must never be accepted.
    if path is None:
        raise ConfigError(
            "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH is not set: the checkpoint verifies every "
            "reported outcome against the executor's receipt public key set "
            "(`airlock executor keygen --public FILE` writes one)"
        )
    try:
        return KeySet.from_json_bytes(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"receipt key set {path}: cannot read: {exc.strerror}") from None
    except KeySetError as exc:
        raise ConfigError(f"receipt key set {path}: {exc}") from None


@dataclass(frozen=True, slots=True)
class RefusalLimits:
    """How refusals are aggregated and rate-limited (``refusals.RefusalRecorder``)."""

    #: Seconds between writes of the counted refusals (and the most a crash loses).
    interval: int = 60
    #: Refusals a token may have in a row before it is refused E_RATE_LIMITED.
    burst: int = 60
    #: Refusals a token earns back each minute.
    per_minute: int = 60


def create_app(
    checkpoint: Checkpoint,
    accounts: Accounts,
    *,
    signal: FeedSignal | None = None,
    feed_max_wait: int = 30,
    sweep_interval: float | None = None,
    refusal_limits: RefusalLimits | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    allowed_hosts: Iterable[str] = LOOPBACK_HOSTS,
    trusted_proxies: tuple[str, ...] = (),
    notify_senders: Mapping[str, Sender] | None = None,
    notify_poll: float = 1.0,
) -> FastAPI:
    """The ASGI app over an already-built service (tests build the service themselves).

    A request whose ``Host`` names none of ``allowed_hosts`` is refused 400 ``E_HOST``.

    While it runs (its lifespan), a task writes the counted refusals every
    ``refusal_limits.interval`` seconds, and once more when it stops. On PostgreSQL a
    thread listens for feed changes committed by any checkpoint process on the database
    and wakes this one's long-polls (:mod:`~services.checkpoint.wake`).

    ``trusted_proxies``: addresses whose ``X-Forwarded-For`` names the client of a
    sign-in (``routes.client_address``); from any other peer the header is ignored.

    With channels in the policy's ``[notify]`` table, a thread sends the outbox while
    the app runs (:class:`~services.checkpoint.notify.Dispatcher`), through
    ``notify_senders`` (None: opened from the policy, reading their secret files), at
    least every ``notify_poll`` seconds and at once after a commit that wrote an event.
    """
    refusals = _refusal_recorder(checkpoint, refusal_limits or RefusalLimits(), monotonic)
    metrics = Metrics()
    dispatcher = _dispatcher(checkpoint, metrics, notify_senders, notify_poll)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        forget: Callable[[], None] | None = None
        listener = _listener(checkpoint, app.state.feed_signal, refusals)
        if listener is not None:
            listener.start()
        if dispatcher is not None:
            forget = _wake_on_commit(checkpoint.engine, dispatcher)
            dispatcher.start()
        tasks = [asyncio.create_task(_flusher(refusals))]
        if sweep_interval is not None:
            tasks.append(asyncio.create_task(_sweeper(checkpoint, accounts, sweep_interval)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if dispatcher is not None and forget is not None:
                forget()
                await run_in_threadpool(dispatcher.stop)
            if listener is not None:
                await run_in_threadpool(listener.stop)
            # After the server stopped taking requests: every refusal counted is written.
            try:
                await run_in_threadpool(refusals.flush)
            except Exception:
                _log.exception("at stop, %d counted refusals were not written", refusals.pending())
            # The tally of refused sign-ins not yet written: a stop must not lose it.
            try:
                await run_in_threadpool(lambda: accounts.flush_refused_sign_ins(force=True))
            except Exception:
                _log.exception("at stop, the tally of refused sign-ins was not written")

    app = bare_app(lifespan)
    # A page on another name resolving to this address (DNS rebinding) is answered
    # before anything else is done for it.
    guard(
        app,
        hosts=allowed_hosts,
        host_refusal=json.dumps(
            {"error": {"code": ErrorCode.E_HOST.value, "message": "unknown Host"}}
        ).encode(),
    )
    app.state.refusals = refusals
    app.state.checkpoint = checkpoint
    app.state.accounts = accounts
    app.state.metrics = metrics
    app.state.notify = dispatcher
    app.state.feed_max_wait = feed_max_wait
    app.state.trusted_proxies = frozenset(trusted_proxies)
    app.state.feed_signal = signal or FeedSignal()
    if signal is None:
        checkpoint.on_change = app.state.feed_signal.bump
    return app


def bare_app(lifespan: Any = None) -> FastAPI:
    """The routes and error mapping with no service behind them (for the OpenAPI file)."""
    app = FastAPI(
        title="Airlock checkpoint",
        version=API_VERSION,
        description="Proposals, human approvals and the signed-approval feed (docs/protocol.md).",
        lifespan=lifespan,
        # No Swagger UI or ReDoc: they load scripts from a CDN into the checkpoint's
        # origin. The API is /openapi.json (and services/checkpoint/openapi.json).
        docs_url=None,
        redoc_url=None,
        # No OpenTelemetry of FastAPI's own: the checkpoint's metrics are its Prometheus
        # registry (/metrics), and a tracer set up process-wide must not get requests'
        # data (a bearer token is a header). Off here, it costs no look-up per request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    install(app)
    mount(app, prefs.router)  # /v1/me/notifications
    app.openapi = lambda: openapi_schema(app)  # type: ignore[method-assign]
    return app


async def _sweeper(checkpoint: Checkpoint, accounts: Accounts, interval: float) -> None:
    while True:
        try:
            counts = await run_in_threadpool(checkpoint.sweep)
            if any(counts.values()):
                _log.info(
                    "sweep: %(expired)d expired, %(lapsed)d lapsed, %(escalated)d escalated",
                    counts,
                )
            await run_in_threadpool(accounts.flush_refused_sign_ins)
        except Exception:  # a failed sweep must not stop the next one
            _log.exception("sweep failed")
        await asyncio.sleep(interval)


def _refusal_recorder(
    checkpoint: Checkpoint, limits: RefusalLimits, monotonic: Callable[[], float]
) -> RefusalRecorder:
    """The app's refusal recorder; on PostgreSQL its budgets are the replicas' shared
    ones (``limits.RefusalBudgets``)."""
    replicated = checkpoint.engine.dialect.name == "postgresql"
    return RefusalRecorder(
        write_one=lambda event: checkpoint.audit_refusals([event]),
        write_many=checkpoint.audit_refusals,
        now=checkpoint.now,
        interval=limits.interval,
        burst=limits.burst,
        per_minute=limits.per_minute,
        monotonic=monotonic,
        shared=RefusalBudgets(
            checkpoint.engine, burst=limits.burst, per_second=limits.per_minute / 60.0
        )
        if replicated
        else None,
    )


def _listener(
    checkpoint: Checkpoint, signal: FeedSignal, refusals: RefusalRecorder
) -> Listener | None:
    """On PostgreSQL, the listener that wakes this process's long-polls for a feed
    change committed by any process on the database, and copies the refusal budgets
    another replica spent; None on SQLite."""
    if checkpoint.engine.dialect.name != "postgresql":
        return None
    return Listener(
        checkpoint.engine.url, {FEED: lambda _payload: signal.bump(), LIMITS: refusals.adopt}
    )


def _dispatcher(
    checkpoint: Checkpoint,
    metrics: Metrics,
    senders: Mapping[str, Sender] | None,
    poll: float,
) -> Dispatcher | None:
    """The delivery worker over the checkpoint's outbox, or None with no channel."""
    if not checkpoint.notify.active:
        return None
    return Dispatcher(
        checkpoint.engine,
        checkpoint.notify,
        open_channels(checkpoint.notify) if senders is None else senders,
        now=checkpoint.now,
        metrics=_NotifyMetrics(metrics),
        poll=poll,
    )


class _NotifyMetrics:
    """The delivery worker's counts, in the app's registry (``/metrics``)."""

    def __init__(self, metrics: Metrics) -> None:
        registry = metrics.registry
        self.deliveries = Counter(
            "airlock_checkpoint_notify_deliveries",
            "Notification tries by channel and result (delivered, failed, dead)",
            ["channel", "result"],
            registry=registry,
        )
        self.pending = Gauge(
            "airlock_checkpoint_notify_outbox_pending",
            "Notification deliveries waiting to be sent",
            registry=registry,
        )
        self.dead = Gauge(
            "airlock_checkpoint_notify_outbox_dead",
            "Notification deliveries given up on (airlock notify outbox)",
            registry=registry,
        )
        self.oldest = Gauge(
            "airlock_checkpoint_notify_outbox_age_seconds",
            "Age of the oldest notification waiting to be sent",
            registry=registry,
        )

    def delivery(self, channel: str, result: str) -> None:
        self.deliveries.labels(channel, result).inc()

    def outbox(self, stats: OutboxStats) -> None:
        self.pending.set(stats.pending)
        self.dead.set(stats.dead)
        self.oldest.set(stats.oldest_age)


def _wake_on_commit(engine: sa.Engine, dispatcher: Dispatcher) -> Callable[[], None]:
    """Wake the worker when a connection whose transaction wrote an event goes back to
    the pool (``notify.record`` marks it), so a message leaves at once, not at the next
    poll. Returns what removes the listener.

    A pool event, not the engine's ``commit``: a connection event listener makes every
    statement of every request dispatch events. One that rolled back wakes the worker
    for nothing, which costs a pass that finds nothing new.
    """

    def checked_in(dbapi_connection: object, record: ConnectionPoolEntry | None) -> None:
        if record is not None and record.info.pop(WAKE, False):
            dispatcher.wake()

    sa.event.listen(engine.pool, "checkin", checked_in)

    def forget() -> None:
        sa.event.remove(engine.pool, "checkin", checked_in)

    return forget


async def _flusher(refusals: RefusalRecorder) -> None:
    while True:
        await asyncio.sleep(refusals.interval)
        try:
            await run_in_threadpool(refusals.flush)
        except Exception:  # kept for the next flush; a failed one must not stop it
            _log.exception("writing the counted refusals failed; kept for the next try")


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document, with every refusal documented as the one error body.

    It replaces ``FastAPI.openapi`` and keeps its type: the document is any JSON object.
    """
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    error_ref = {"$ref": "#/components/schemas/ErrorBody"}
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.setdefault("responses", {})
            if "422" in responses:
                responses["422"] = {
                    "description": "Refused: invalid request (E_INVALID and others)",
                    "content": {"application/json": {"schema": error_ref}},
                }
            responses["default"] = {
                "description": "Refused: {error: {code, message}}",
                "content": {"application/json": {"schema": error_ref}},
            }
    app.openapi_schema = schema
    return schema
