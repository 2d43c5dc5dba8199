"""``airlock devcloud serve|seed``: run or seed the local Alibaba Cloud double (dev/test only).

devcloud is imported inside each command, never at module import
(docs/architecture.md#import-boundaries).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._help import Typer

if TYPE_CHECKING:
    from airlock.settings import DevcloudSettings

__all__ = ["devcloud_app"]

devcloud_app = Typer(
    name="devcloud",
    help="The local Alibaba Cloud double (ECS, RDS, CloudMonitor). Dev and tests only.",
    no_args_is_help=True,
)


def _settings(**overrides: Any) -> DevcloudSettings:
    from airlock.settings import DevcloudSettings

    from ._settings import load

    changes = {k: v for k, v in overrides.items() if v is not None}
    # Command-line options win over AIRLOCK_DEVCLOUD_* (init arguments outrank the env).
    return load(DevcloudSettings, **changes)


@devcloud_app.command("serve")
def serve_command(
    *,
    port: Annotated[int | None, typer.Option(help="Port (default 8788).")] = None,
    host: Annotated[
        str | None, typer.Option(metavar="ADDRESS", help="Bind address (default 127.0.0.1).")
    ] = None,
    db: Annotated[
        Path | None, typer.Option(metavar="FILE", help="SQLite file of the fleet.")
    ] = None,
    enable_admin: Annotated[
        bool,
        typer.Option(
            "--enable-admin", help="Serve the admin API (needs AIRLOCK_DEVCLOUD_ADMIN_TOKEN)."
        ),
    ] = False,
    transition_seconds: Annotated[
        float | None, typer.Option(metavar="SECONDS", help="Seconds an instance stays Stopping.")
    ] = None,
) -> None:
    """Serve the ECS/RDS/CloudMonitor API subset on one port (one worker)."""
    import uvicorn

    from services.devcloud import create_app

    settings = _settings(
        port=port,
        host=host,
        db_path=db,
        enable_admin=True if enable_admin else None,
        transition_seconds=transition_seconds,
    )
    settings.db_path.parent.mkdir(parents=True, exist_ok=True)
    app = create_app(settings)
    admin = "on" if settings.enable_admin else "off"
    typer.echo(
        f"devcloud (dev only) on http://{settings.host}:{settings.port}, db {settings.db_path},"
        f" admin API {admin}",
        err=True,
    )
    # One worker: the fault counters and nonces live in SQLite and would work with more,
    # but a single process keeps latency injection and tests simple to reason about.
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        workers=1,
        # Responses withheld by an apply-then-drop fault are not worth draining on exit.
        timeout_graceful_shutdown=1,
    )


@devcloud_app.command("seed")
def seed_command(
    *,
    instances: Annotated[int, typer.Option(metavar="N", help="Number of ECS instances.")] = 200,
    rds: Annotated[
        int | None,
        typer.Option(
            metavar="N", help="Number of RDS instances (default: a tenth of --instances)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(metavar="N", help="PRNG seed: same seed, same fleet.")] = 1,
    now: Annotated[
        int | None,
        typer.Option(metavar="UNIX_TIME", help="Anchor time, Unix seconds (default: now)."),
    ] = None,
    region: Annotated[
        list[str] | None, typer.Option("--region", help="Region (repeatable).")
    ] = None,
    db: Annotated[
        Path | None, typer.Option(metavar="FILE", help="SQLite file of the fleet.")
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Add to the existing fleet.")] = False,
) -> None:
    """Replace the fleet with a deterministic one (idle, busy, bursty, protected, prod, young…)."""
    from services.devcloud import Store, seed_store

    settings = _settings(db_path=db)
    settings.db_path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(settings.db_path, transition_seconds=settings.transition_seconds)
    started = time.perf_counter()
    added = seed_store(
        store,
        seed=seed,
        instances=instances,
        rds=instances // 10 if rds is None else rds,
        now=int(time.time()) if now is None else now,
        regions=tuple(region or ("ap-southeast-1",)),
        replace=not keep,
    )
    store.close()
    typer.echo(
        f"seeded {added} instances into {settings.db_path} in {time.perf_counter() - started:.2f}s"
    )
