"""``airlock devcloud serve|seed|faults|writes``: the local Alibaba Cloud double (dev/test only).

devcloud is imported inside each command, never at module import
(docs/architecture.md#import-boundaries).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

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
    """Serve the ECS/RDS/CloudMonitor API subset on one port (one worker).

    With AIRLOCK_DEVCLOUD_SEED_INSTANCES set, a database never seeded gets a fleet first.
    """
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
    if app.state.seeded:
        typer.echo(f"seeded {app.state.seeded} instances into {settings.db_path}", err=True)
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
    hostile_names: Annotated[
        bool,
        typer.Option(
            "--hostile-names",
            help="Name instances and tags with markup, quotes and mixed scripts, as the "
            "tests do (default: realistic names such as web-staging-07).",
        ),
    ] = False,
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
        demo=not hostile_names,
    )
    store.close()
    typer.echo(
        f"seeded {added} instances into {settings.db_path} in {time.perf_counter() - started:.2f}s"
    )


# -- the admin API, for a person checking what the cloud really did -------------------------

_ADMIN_HELP = (
    "devcloud's admin API must be on (airlock up --devcloud-admin). Its token is read from "
    "AIRLOCK_DEVCLOUD_ADMIN_TOKEN, else from devcloud-admin-token in up's state directory."
)

UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        metavar="URL",
        envvar="AIRLOCK_DEVCLOUD_URL",
        help="devcloud's address (default: the one a running up in --home serves, else "
        "http://127.0.0.1:8788).",
        show_default=False,
    ),
]
HomeOpt = Annotated[
    Path,
    typer.Option(
        "--home",
        metavar="DIR",
        envvar="AIRLOCK_UP_HOME",
        help="up's state directory, holding devcloud-admin-token.",
    ),
]
_DEFAULT_URL = "http://127.0.0.1:8788"
_DEFAULT_HOME = Path(".airlock")


def _admin_token(home: Path) -> str:
    import os

    token = os.environ.get("AIRLOCK_DEVCLOUD_ADMIN_TOKEN", "").strip()
    if token:
        return token
    try:
        return (home / "devcloud-admin-token").read_text().strip()
    except OSError:
        typer.echo(
            f"error: no devcloud admin token ({home / 'devcloud-admin-token'} is missing): "
            "start up with --devcloud-admin",
            err=True,
        )
        raise typer.Exit(2) from None


def _devcloud_url(url: str | None, home: Path) -> str:
    """``url``, else the devcloud a running ``up`` with state ``home`` recorded serving
    (``up.json``: ``up --devcloud-port``), else the usual port."""
    if url:
        return url
    from airlock.settings import up_ports

    port = up_ports(home / "up.json").get("devcloud")
    return _DEFAULT_URL if port is None else f"http://127.0.0.1:{port}"


def _admin_call(method: str, url: str | None, home: Path, path: str, **kwargs: Any) -> Any:
    """One admin API call; exit 1 with one line when devcloud refuses or is not there."""
    import httpx

    from ._text import inert

    token = _admin_token(home)
    url = _devcloud_url(url, home)
    try:
        with httpx.Client(base_url=url, timeout=10.0, trust_env=False) as client:
            response = client.request(
                method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs
            )
    except (httpx.HTTPError, ValueError) as exc:
        typer.echo(f"error: devcloud is not reachable at {inert(url)}: {inert(str(exc))}", err=True)
        raise typer.Exit(3) from None
    if response.status_code == 404:
        typer.echo(f"error: devcloud's admin API is off at {inert(url)}: {_ADMIN_HELP}", err=True)
        raise typer.Exit(1)
    if response.status_code == 401:
        typer.echo("error: devcloud refused the admin token", err=True)
        raise typer.Exit(1)
    if response.status_code != 200:
        typer.echo(
            f"error: devcloud answered {response.status_code}: {inert(response.text[:200])}",
            err=True,
        )
        raise typer.Exit(1)
    return response.json()


def _print_faults(faults: dict[str, Any]) -> None:
    for key in sorted(faults):
        typer.echo(f"{key:<17}{faults[key]}")


@devcloud_app.command("faults")
def faults_command(
    *,
    fail_next_writes: Annotated[
        int | None,
        typer.Option(metavar="N", min=0, help="Fail the next N writes before any effect."),
    ] = None,
    fail_next_reads: Annotated[
        int | None, typer.Option(metavar="N", min=0, help="Fail the next N reads.")
    ] = None,
    fail_kind: Annotated[
        Literal["unavailable", "internal", "throttling"] | None,
        typer.Option(
            help="How they fail: unavailable (503), internal (500) or throttling (400).",
        ),
    ] = None,
    drop_next_writes: Annotated[
        int | None,
        typer.Option(
            metavar="N", min=0, help="Apply the next N writes, then withhold or cut the answer."
        ),
    ] = None,
    drop_mode: Annotated[
        Literal["timeout", "reset"] | None,
        typer.Option(help="timeout (withhold the answer) or reset (cut it)."),
    ] = None,
    drop_delay_ms: Annotated[
        int | None, typer.Option(metavar="MS", min=0, help="How long a dropped answer waits.")
    ] = None,
    latency_ms: Annotated[
        int | None, typer.Option(metavar="MS", min=0, help="Delay added to every request.")
    ] = None,
    write_latency_ms: Annotated[
        int | None, typer.Option(metavar="MS", min=0, help="Delay added to every write.")
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove every fault.")] = False,
    url: UrlOpt = None,
    home: HomeOpt = _DEFAULT_HOME,
) -> None:
    """Show or set the faults devcloud injects; with no option, show them.

    An in_doubt to resolve: airlock devcloud faults --fail-next-writes 1 --fail-kind internal

    The admin API must be on: airlock up --devcloud-admin. Dev and tests only.
    """
    changes = {
        key: value
        for key, value in {
            "fail_next_writes": fail_next_writes,
            "fail_next_reads": fail_next_reads,
            "fail_kind": fail_kind,
            "drop_next_writes": drop_next_writes,
            "drop_mode": drop_mode,
            "drop_delay_ms": drop_delay_ms,
            "latency_ms": latency_ms,
            "write_latency_ms": write_latency_ms,
        }.items()
        if value is not None
    }
    if clear and changes:
        typer.echo("error: --clear takes no other fault option", err=True)
        raise typer.Exit(2)
    if clear:
        faults = _admin_call("DELETE", url, home, "/_admin/faults")
    elif changes:
        faults = _admin_call("POST", url, home, "/_admin/faults", json=changes)
    else:
        faults = _admin_call("GET", url, home, "/_admin/faults")
    _print_faults(faults)


@devcloud_app.command("writes")
def writes_command(
    *,
    resource: Annotated[
        str | None, typer.Option(metavar="ID", help="Only the writes to this resource (i-…).")
    ] = None,
    action: Annotated[
        str | None, typer.Option(metavar="ACTION", help="Only this call (StopInstance…).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The write log as JSON.")] = False,
    url: UrlOpt = None,
    home: HomeOpt = _DEFAULT_HOME,
) -> None:
    """List the writes devcloud carried out: what really happened in the cloud.

    Before resolving an in_doubt: airlock devcloud writes --resource i-… (none: it did not happen).

    A write devcloud failed on purpose (faults) had no effect and is not listed.

    The admin API must be on: airlock up --devcloud-admin. Dev and tests only.
    """
    import json
    from datetime import UTC, datetime

    from ._text import inert, inert_json

    params = {k: v for k, v in {"resource_id": resource, "action": action}.items() if v}
    writes = _admin_call("GET", url, home, "/_admin/writes", params=params)["writes"]
    if as_json:
        typer.echo(inert_json(json.loads(json.dumps(writes))))
        return
    if not writes:
        where = f" to {inert(resource)}" if resource else ""
        typer.echo(f"no writes{where}: devcloud carried out none")
        return
    for w in writes:
        at = datetime.fromtimestamp(float(w["at"]), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        typer.echo(
            f"{w['seq']:>5}  {at}  {inert(str(w['action'])):<16}  "
            f"{inert(str(w['resource_id']))}  request {inert(str(w['request_id']))}"
        )
