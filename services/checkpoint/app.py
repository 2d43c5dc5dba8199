"""Building the checkpoint: from settings to a running FastAPI app with its sweeper.

:func:`build` refuses to produce an app when anything the checkpoint needs is wrong — a
malformed policy, a signing key file others can read, no active key, a missing or
malformed executor receipt key set, an unreachable database — with a
:class:`ConfigError` that names the file or setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi

from airlock.protocol import KeySet, KeySetError
from airlock.settings import CheckpointSettings
from airlock.store import upgrade

from ._db import Database
from .auth import Accounts
from .errors import ConfigError
from .keys import KeyDirectory, KeyRing
from .policy import load_policy
from .routes import FeedSignal, Metrics, install
from .service import Checkpoint, CheckpointConfig

__all__ = ["DEFAULT_POLICY", "MIGRATIONS", "bare_app", "build", "create_app", "openapi_schema"]

DEFAULT_POLICY: Final = Path(__file__).with_name("default-policy.toml")
MIGRATIONS: Final = Path(__file__).with_name("migrations")
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
        trusted_proxies=settings.trusted_proxies,
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


def create_app(
    checkpoint: Checkpoint,
    accounts: Accounts,
    *,
    signal: FeedSignal | None = None,
    feed_max_wait: int = 30,
    sweep_interval: float | None = None,
    trusted_proxies: tuple[str, ...] = (),
) -> FastAPI:
    """The ASGI app over an already-built service (tests build the service themselves).

    ``trusted_proxies``: addresses whose ``X-Forwarded-For`` names the client of a
    sign-in (``routes.client_address``); from any other peer the header is ignored."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = None
        if sweep_interval is not None:
            task = asyncio.create_task(_sweeper(checkpoint, accounts, sweep_interval))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # The tally of refused sign-ins not yet written: a stop must not lose it.
            await run_in_threadpool(lambda: accounts.flush_refused_sign_ins(force=True))

    app = bare_app(lifespan)
    app.state.checkpoint = checkpoint
    app.state.accounts = accounts
    app.state.metrics = Metrics()
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
    )
    install(app)
    app.openapi = lambda: openapi_schema(app)  # type: ignore[method-assign]
    return app


async def _sweeper(checkpoint: Checkpoint, accounts: Accounts, interval: float) -> None:
    while True:
        try:
            counts = await run_in_threadpool(checkpoint.sweep)
            if any(counts.values()):
                _log.info("sweep: %(expired)d expired, %(lapsed)d lapsed", counts)
            await run_in_threadpool(accounts.flush_refused_sign_ins)
        except Exception:  # a failed sweep must not stop the next one
            _log.exception("sweep failed")
        await asyncio.sleep(interval)


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document, with every refusal documented as the one error body."""
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
