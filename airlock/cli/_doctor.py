"""``airlock doctor``: is this host's Airlock set up the way it needs to be?

One line per check, ``ok`` / ``warn`` / ``fail``, exit 1 if any check fails:

- configuration: ``AIRLOCK_ENV``, which services' settings load here, dev defaults in use;
- key files: the checkpoint's private signing keys and the executor's receipt key are
  mode 0600; the executor's trusted key set and the checkpoint's executor receipt key
  set exist, parse and are not writable by others (with ``AIRLOCK_ENV=dev``, each at its
  dev default in ``.airlock/`` unless set, where ``airlock up`` puts them);
- databases: each configured service database answers ``SELECT 1``; its Alembic revision;
- each side of a trust or binding against the other, where this host has both (a
  mismatch passes each side alone, then refuses every approval once people approved it):
  the executor's trusted key set holds the checkpoint's active key from ``GET /v1/keys``
  (E_UNKNOWN_KEY), its staged key if it has one (a warning: ``keys rotate`` would strand
  approvals) and no key the checkpoint revoked (a warning); the checkpoint's
  executor receipt key set holds the executor's receipt key (E_RECEIPT); the checkpoint's
  audience is the executor's (E_AUDIENCE); the agent's account and regions are the
  executor's binding (E_ACCOUNT). The audience is compared only when both settings load
  here: the checkpoint does not publish it;
- the checkpoint: ``/healthz`` and ``/readyz``;
- the clock: local time against the checkpoint's ``Date`` header, within the executor's
  tolerated skew.

The doctor only reads: it never creates a database, a directory or a key, never changes a
mode, and never prints a secret (database URLs are shown without their password). It uses
the kernel (settings, storage) and talks to the checkpoint over HTTP; it imports no service.
It reads the executor's receipt private key only to derive its key id.
"""

from __future__ import annotations

import enum
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from ._client import CheckpointClient, CheckpointRefused, CheckpointUnavailable
from ._doctor_aws import settings_checks
from ._doctor_trust import Status, approval_trust, receipt_trust
from ._text import say

if TYPE_CHECKING:
    from airlock.protocol import KeySet
    from airlock.settings import (
        AgentSettings,
        CheckpointSettings,
        DevcloudSettings,
        ExecutorSettings,
        ServiceSettings,
        WebappSettings,
    )

__all__ = [
    "Report",
    "approval_trust",
    "checkpoint_check",
    "clock_check",
    "doctor_command",
    "receipt_trust",
]


class Service(enum.StrEnum):
    CHECKPOINT = "checkpoint"
    EXECUTOR = "executor"
    AGENT = "agent"
    WEBAPP = "webapp"
    DEVCLOUD = "devcloud"


#: The checkpoint key directory's manifest (services/checkpoint/keys.py; not imported here).
_KEY_MANIFEST: Final = "keyset.json"
#: Settings whose default is a dev convenience, reported when left unset.
_DEV_DEFAULTS: Final[dict[Service, tuple[str, ...]]] = {
    Service.CHECKPOINT: ("database_url", "keys_dir", "receipt_keys_path", "audience"),
    Service.EXECUTOR: ("database_url", "account", "audience", "cloud_access_key_id"),
    Service.AGENT: ("account", "cloud_access_key_id", "checkpoint_url"),
    Service.WEBAPP: ("checkpoint_url",),
    Service.DEVCLOUD: (),
}
_DEFAULT_SKEW: Final = 30


@dataclass(frozen=True, slots=True)
class Check:
    status: Status
    name: str
    detail: str


class Report:
    """The checks so far, each printed as it is added (``ok``, ``warn`` or ``fail``)."""

    def __init__(self) -> None:
        self.checks: list[Check] = []

    def add(self, status: Status, name: str, detail: str) -> None:
        check = Check(status, name, detail)
        self.checks.append(check)
        # A detail can quote the checkpoint's answers, a key file's or a database's text.
        say(f"{check.status:<5} {check.name:<22} {check.detail}")

    @property
    def failed(self) -> int:
        return sum(1 for c in self.checks if c.status == "fail")

    @property
    def warned(self) -> int:
        return sum(1 for c in self.checks if c.status == "warn")


def _settings_class(service: Service) -> type[ServiceSettings]:
    from airlock import settings

    classes: dict[Service, type[ServiceSettings]] = {
        Service.CHECKPOINT: settings.CheckpointSettings,
        Service.EXECUTOR: settings.ExecutorSettings,
        Service.AGENT: settings.AgentSettings,
        Service.WEBAPP: settings.WebappSettings,
        Service.DEVCLOUD: settings.DevcloudSettings,
    }
    return classes[service]


def _first_error(exc: Exception) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        return f"{where}: {message}" if where else message
    return str(exc).splitlines()[0]


@dataclass
class _Loaded:
    """The settings classes that loaded in this environment, typed for their callers."""

    checkpoint: CheckpointSettings | None = None
    executor: ExecutorSettings | None = None
    agent: AgentSettings | None = None
    webapp: WebappSettings | None = None
    devcloud: DevcloudSettings | None = None


def _load_settings(report: Report, expected: set[Service]) -> _Loaded:
    env = os.environ.get("AIRLOCK_ENV", "")
    if env == "dev":
        report.add(
            "ok", "environment", "AIRLOCK_ENV=dev: demo defaults allowed (not for production)"
        )
    elif env in ("", "prod"):
        report.add("ok", "environment", f"AIRLOCK_ENV={env or 'unset'}: production rules apply")
    else:
        report.add("fail", "environment", f"AIRLOCK_ENV={env!r}: must be dev or prod")
    if Path(".env").is_file():
        report.add("ok", "environment", f"also reading {Path('.env').resolve()}")
    loaded = _Loaded()
    for service in Service:
        name = f"settings.{service.value}"
        try:
            value = _settings_class(service)()
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            if service is Service.DEVCLOUD and env != "dev" and service not in expected:
                report.add("ok", name, "not used outside AIRLOCK_ENV=dev")
            elif service in expected:
                report.add("fail", name, _first_error(exc))
            else:
                report.add("warn", name, f"not configured here ({_first_error(exc)})")
            continue
        setattr(loaded, service.value, value)
        defaults = [f for f in _DEV_DEFAULTS[service] if f not in value.model_fields_set]
        note = f" (dev defaults: {', '.join(defaults)})" if defaults and env == "dev" else ""
        report.add("ok", name, f"loads{note}")
    return loaded


# -- files -----------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _private_file(report: Report, name: str, path: Path, missing_hint: str) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        report.add("fail", name, f"{path} is missing ({missing_hint})")
        return
    if stat.S_ISLNK(info.st_mode):
        report.add("fail", name, f"{path} is a symbolic link; services refuse to follow it")
        return
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        report.add("fail", name, f"{path} is mode {mode:04o}; must be 0600 (chmod 600 it)")
    elif info.st_uid != os.getuid():
        report.add("warn", name, f"{path} is 0600 but owned by uid {info.st_uid}, not you")
    else:
        report.add("ok", name, f"{path} is 0600")


def _checkpoint_keys(report: Report, keys_dir: Path) -> None:
    from airlock.protocol import Error as ProtocolError
    from airlock.protocol import loads_strict

    manifest = keys_dir / _KEY_MANIFEST
    try:
        value = loads_strict(manifest.read_bytes(), max_bytes=1 << 20, nfc=False)
        records = value["keys"]
        files = [(str(r["kid"]), str(r["status"]), str(r["file"])) for r in records]
        unbounded = [
            str(r["kid"]) for r in records if r["status"] == "retired" and "not_after" not in r
        ]
    except FileNotFoundError:
        report.add("fail", "keys.checkpoint", f"no key set at {manifest} (airlock keys generate)")
        return
    except (OSError, ProtocolError, KeyError, TypeError) as exc:
        report.add("fail", "keys.checkpoint", f"{manifest} is unreadable or malformed: {exc}")
        return
    if _mode(keys_dir) & 0o022:
        report.add(
            "fail",
            "keys.checkpoint",
            f"{keys_dir} is writable by group or others (mode {_mode(keys_dir):04o})",
        )
    if _mode(manifest) & 0o022:
        report.add("fail", "keys.checkpoint", f"{manifest} is writable by group or others")
    active = [kid for kid, status, _ in files if status == "active"]
    if len(active) != 1:
        report.add("fail", "keys.checkpoint", f"{len(active)} active signing keys; exactly one")
    staged = [kid for kid, status, _ in files if status == "next"]
    if len(staged) > 1:  # keys stage refuses a second; only a hand edit makes one
        report.add(
            "warn",
            "keys.next",
            f"{len(staged)} staged keys ({', '.join(staged)}): keys rotate refuses to choose; "
            "airlock keys revoke all but one",
        )
    for kid, status, file in files:
        path = keys_dir / Path(file).name
        if status == "active":
            _private_file(report, "keys.active", path, f"the private key of {kid}")
        elif status == "next":  # staged (keys stage): kept for the rotate that activates it
            if path.exists() or path.is_symlink():
                _private_file(report, "keys.next", path, f"the private key of {kid}")
            else:
                report.add(
                    "warn",
                    "keys.next",
                    f"the private key of staged key {kid} is missing ({path}): keys rotate "
                    f"refuses to make it active; airlock keys revoke {kid} and stage another",
                )
        elif path.exists():  # rotate and revoke delete it (as keys list warns too)
            report.add(
                "warn",
                f"keys.{status}",
                f"the private key of {status} key {kid} is still on disk ({path}); "
                "nothing signs with it: delete it",
            )
    for kid in unbounded:
        report.add(
            "warn",
            "keys.retired",
            f"retired key {kid} has no not_after (rotated by an older Airlock): executors "
            f"trust it with no end; run `airlock keys revoke {kid}` (its approvals expired "
            "an execution window after that rotation) and re-export the public key set",
        )


def _trusted_keys(
    report: Report,
    path: Path,
    name: str = "keys.trusted",
    made_by: str = "airlock keys export-public",
) -> KeySet | None:
    """A public key set a service trusts: present, parseable, writable only by its owner.
    The key set when it is, for the checks that compare it with its other side."""
    from airlock.protocol import Error as ProtocolError
    from airlock.protocol import KeySet, KeyStatus, loads_strict

    try:
        keyset = KeySet.from_value(loads_strict(path.read_bytes(), max_bytes=1 << 20))
    except FileNotFoundError:
        report.add("fail", name, f"{path} is missing ({made_by})")
        return None
    except (OSError, ProtocolError, ValueError) as exc:
        report.add("fail", name, f"{path} is unreadable or malformed: {exc}")
        return None
    if _mode(path) & 0o022:
        # Whoever may write this file may make the service trust their own key.
        report.add("fail", name, f"{path} is writable by group or others")
        return None
    keys = [keyset[kid] for kid in keyset]
    active = sum(1 for k in keys if k.status is KeyStatus.ACTIVE)
    staged = sum(1 for k in keys if k.status is KeyStatus.NEXT)
    also = f", {staged} staged" if staged else ""
    report.add("ok", name, f"{path}: {len(keys)} keys, {active} active{also}")
    return keyset


def _receipt_keys(report: Report, settings: CheckpointSettings) -> KeySet | None:
    """The executor receipt keys the checkpoint verifies every outcome against."""
    path = settings.receipt_keys_path
    if path is None:
        report.add(
            "fail",
            "keys.receipts",
            "AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH is not set: the checkpoint refuses to start; "
            "set it to the executor's receipt public key set "
            "(airlock executor keygen --public FILE writes one)",
        )
        return None
    made_by = "airlock executor keygen --public FILE"
    if "receipt_keys_path" not in settings.model_fields_set:
        made_by = (
            "the dev default, which airlock up writes here; or set "
            f"AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH to a key set from {made_by}"
        )
    return _trusted_keys(report, path, "keys.receipts", made_by)


def _production_tags(report: Report, agent: AgentSettings, executor: ExecutorSettings) -> None:
    """The agent never proposes what it reads as production, and the executor refuses a
    write to what it reads as production: the two must read tags alike."""

    def reading(keys: tuple[str, ...], prefix: str) -> tuple[list[str], str]:
        return sorted({k.casefold() for k in keys}), prefix.casefold()

    ours = reading(agent.prod_tag_keys, agent.prod_value_prefix)
    theirs = reading(executor.prod_tag_keys, executor.prod_value_prefix)
    shown = f"keys {ours[0]}, value prefix {ours[1]!r}"
    if ours == theirs:
        report.add("ok", "tags.production", f"agent and executor read alike: {shown}")
    else:
        report.add(
            "warn",
            "tags.production",
            f"the agent reads production tags as {shown}, the executor as keys {theirs[0]}, "
            f"value prefix {theirs[1]!r}: set AIRLOCK_AGENT_PROD_TAG_KEYS/_PROD_VALUE_PREFIX "
            "and AIRLOCK_EXECUTOR_PROD_TAG_KEYS/_PROD_VALUE_PREFIX alike",
        )


# -- the two sides of each trust and binding ------------------------------------------
#
# Each of these mismatches passes every check of each side alone and then refuses every
# approval (or receipt) at its other side, once people have approved it.


def _receipt_key_id(report: Report, path: Path) -> str | None:
    """The key id of the executor's receipt key: the public half, derived here. Never the
    key itself, nor a loader's message about its bytes, goes to the output."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_pem_private_key,
    )

    from airlock.protocol import key_id

    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        return None  # keys.receipt says so
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm):
        report.add("fail", "trust.receipts", f"{path} is not a key the executor can load")
        return None
    if not isinstance(key, Ed25519PrivateKey):
        report.add("fail", "trust.receipts", f"{path} is not an Ed25519 key")
        return None
    return key_id(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def _receipt_trust(
    report: Report, receipt_keys: KeySet, path: Path, executor: ExecutorSettings
) -> None:
    kid = _receipt_key_id(report, executor.receipt_key_path)
    if kid is not None:
        status, detail = receipt_trust(receipt_keys, path, kid, int(time.time()))
        report.add(status, "trust.receipts", detail)


def _audience(report: Report, checkpoint: CheckpointSettings, executor: ExecutorSettings) -> None:
    """The checkpoint writes its audience into every statement.

    The executor refuses any other (docs/protocol.md#executor-checks, step 6).
    """
    if checkpoint.audience == executor.audience:
        report.add("ok", "binding.audience", f"checkpoint and executor: {executor.audience!r}")
        return
    report.add(
        "fail",
        "binding.audience",
        f"the checkpoint signs for audience {checkpoint.audience!r}, the executor is "
        f"{executor.audience!r}: every approval is refused E_AUDIENCE; set "
        "AIRLOCK_CHECKPOINT_AUDIENCE and AIRLOCK_EXECUTOR_AUDIENCE alike",
    )


def _account_binding(report: Report, agent: AgentSettings, executor: ExecutorSettings) -> None:
    """The statement's account and region are the action's, which the agent writes; the
    executor refuses any other than its binding (docs/protocol.md#executor-checks, step 7). The
    checkpoint has no binding of its own to compare."""
    proposed, bound = agent.account_or_default(), executor.account_or_default()
    if proposed == bound:
        report.add("ok", "binding.account", f"agent and executor: {bound!r}")
    else:
        report.add(
            "fail",
            "binding.account",
            f"the agent proposes for account {proposed!r}, the executor is bound to {bound!r}: "
            "every approval is refused E_ACCOUNT; set AIRLOCK_AGENT_ACCOUNT and "
            "AIRLOCK_EXECUTOR_ACCOUNT alike",
        )
    regions, region = list(agent.cloud_regions), executor.region
    others = [r for r in regions if r != region]
    if not others:
        report.add("ok", "binding.region", f"agent and executor: {region!r}")
        return
    report.add(
        "warn" if region in regions else "fail",
        "binding.region",
        f"the agent proposes in regions {regions}, the executor is bound to {region!r}: "
        f"approvals in {others} are refused E_ACCOUNT; set AIRLOCK_AGENT_CLOUD_REGIONS "
        "to the executor's AIRLOCK_EXECUTOR_REGION",
    )


def _session_file(report: Report) -> None:
    from ._session import SessionError, read_session, session_path

    path = session_path()
    try:
        session = read_session(path)
    except SessionError as exc:
        report.add("fail", "session", str(exc))
        return
    if session is None:
        report.add("ok", "session", f"no session file at {path}")
    else:
        report.add("ok", "session", f"{path} is 0600 ({session.username} at {session.url})")


# -- databases -------------------------------------------------------------------------


def _database(report: Report, name: str, url: str) -> None:
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    from airlock.store import Error as StoreError
    from airlock.store import make_engine

    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        report.add("fail", name, "not a database URL")
        return
    try:
        engine = make_engine(url, create=False)
    except StoreError as exc:
        report.add("fail", name, f"{shown}: {exc}")
        return
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            try:
                revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
            except sa.exc.SQLAlchemyError:
                revision = None
            conn.rollback()
    except sa.exc.SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        report.add("fail", name, f"{shown}: unreachable: {reason}")
        return
    finally:
        engine.dispose()
    if revision is None:
        report.add("warn", name, f"{shown}: reachable, no migrations applied yet")
    else:
        report.add("ok", name, f"{shown}: reachable, alembic revision {revision}")


# -- the checkpoint and the clock ------------------------------------------------------


def clock_check(local: float, server_date: str | None, skew: int) -> tuple[Status, str]:
    """Compare a local time with an HTTP ``Date`` header (1 s resolution), pure."""
    if not server_date:
        return "warn", "the checkpoint sent no Date header; cannot compare clocks"
    try:
        server = parsedate_to_datetime(server_date).timestamp()
    except (TypeError, ValueError):
        return "warn", f"unparseable Date header {server_date!r}"
    # The header is truncated to whole seconds: allow that second on top of the skew.
    offset = local - server
    if abs(offset) > skew + 1:
        return (
            "warn",
            f"local clock is {offset:+.0f}s off the checkpoint's; the executor tolerates {skew}s",
        )
    return "ok", f"within {skew}s of the checkpoint ({offset:+.0f}s)"


def _checkpoint_url(option: str | None, loaded: _Loaded) -> tuple[str | None, Path | None]:
    """The checkpoint URL to check, and the CA file to trust for it: the CA file of the
    service whose URL it is (``AIRLOCK_<SERVICE>_CHECKPOINT_CA_FILE``), so doctor reaches
    the checkpoint as that service does; None for a URL from ``--url``, the environment
    or the session, which the CLI reaches as it always does (``SSL_CERT_FILE``)."""
    from ._session import SessionError, read_session, session_path

    try:
        session = read_session(session_path())
    except SessionError:
        session = None
    candidates: list[tuple[str | None, Path | None]] = [
        (option, None),
        (os.environ.get("AIRLOCK_CHECKPOINT_URL"), None),
        (session.url if session else None, None),
    ]
    services = [s for s in (loaded.webapp, loaded.agent, loaded.executor) if s is not None]
    # A URL a service was configured with before one it has by default (dev's loopback).
    services.sort(key=lambda s: "checkpoint_url" not in s.model_fields_set)
    candidates += [(s.checkpoint_url, s.checkpoint_ca_file) for s in services]
    if loaded.checkpoint is not None:
        host = loaded.checkpoint.host
        # A bind-all address is reached over loopback from this host.
        if host in ("0.0.0.0", "::"):  # noqa: S104 - compared, not bound
            host = "127.0.0.1"
        candidates.append((f"http://{host}:{loaded.checkpoint.port}", None))
    return next(((url, ca) for url, ca in candidates if url), (None, None))


def checkpoint_check(
    report: Report,
    url: str | None,
    skew: int,
    now: Callable[[], float],
    ca_file: Path | None = None,
    *,
    trusted: tuple[Path, KeySet] | None = None,
) -> None:
    """Check the checkpoint at ``url`` into ``report``: ``/healthz``, ``/readyz``, the clock
    against its ``Date`` within ``skew`` seconds of ``now()``, over ``ca_file`` if given.

    ``trusted``: the executor's trusted key file and its key set, when this host has one
    that parses, to compare with the key set the checkpoint publishes. Raises nothing: a
    failure is a ``fail`` line in ``report``.
    """
    from airlock.tls import CAFileError, checkpoint_verify

    from ._session import SessionError, check_url

    if url is None:
        report.add("warn", "checkpoint", "no checkpoint URL configured here (--url to check one)")
        return
    try:
        base = check_url(url)
    except SessionError as exc:
        report.add("fail", "checkpoint", str(exc))
        return
    try:
        verify = checkpoint_verify(ca_file)
    except CAFileError as exc:  # the settings read it; it changed since
        report.add("fail", "checkpoint.tls", f"CA file {exc}")
        return
    with CheckpointClient(base, verify=verify) as client:
        try:
            before = now()
            response = client.raw("GET", "/healthz")
            after = now()
        except CheckpointUnavailable as exc:
            report.add("fail", "checkpoint.healthz", str(exc))
            return
        if response.status_code != 200:
            report.add(
                "fail", "checkpoint.healthz", f"{base}/healthz answered {response.status_code}"
            )
        else:
            report.add("ok", "checkpoint.healthz", f"{base} is up")
        try:
            client.call("GET", "/readyz")
            report.add("ok", "checkpoint.readyz", "database and signing key ready")
        except CheckpointRefused as exc:
            report.add("fail", "checkpoint.readyz", f"{exc.code}: {exc.message}")
        except CheckpointUnavailable as exc:
            report.add("fail", "checkpoint.readyz", str(exc))
        if trusted is not None:
            _approval_trust(report, client, base, trusted, int(now()))
    status, detail = clock_check((before + after) / 2, response.headers.get("date"), skew)
    report.add(status, "clock", detail)


def _approval_trust(
    report: Report, client: CheckpointClient, base: str, trusted: tuple[Path, KeySet], now: int
) -> None:
    path, keyset = trusted
    from airlock.protocol import Error as ProtocolError
    from airlock.protocol import KeySet

    try:
        response = client.raw("GET", "/v1/keys")
    except CheckpointUnavailable as exc:
        report.add("fail", "trust.approvals", str(exc))
        return
    if response.status_code != 200:
        report.add("fail", "trust.approvals", f"{base}/v1/keys answered {response.status_code}")
        return
    try:
        published = KeySet.from_json_bytes(response.content)
    except ProtocolError as exc:
        report.add("fail", "trust.approvals", f"{base}/v1/keys is not a key set: {exc}")
        return
    for status, detail in approval_trust(published, keyset, path, now):
        report.add(status, "trust.approvals", detail)


def doctor_command(
    *,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="Checkpoint to check (default: AIRLOCK_CHECKPOINT_URL, the session, else a "
            "service's configured URL, checked with that service's CHECKPOINT_CA_FILE).",
        ),
    ] = None,
    service: Annotated[
        list[Service] | None,
        typer.Option(
            "--service",
            metavar="SERVICE",
            help="A service this host runs (checkpoint, executor, agent, webapp, devcloud; "
            "repeatable): its settings must load, or the check fails.",
        ),
    ] = None,
) -> None:
    """Check configuration, key files, databases, tag policies, the checkpoint, the clock.

    Prints one line per check (ok, warn or fail) and exits 1 if any check fails.

    Where this host has both sides, that they match (else every approval fails, once approved):

    the executor trusts the checkpoint's active and staged keys (GET /v1/keys), none it revoked;

    the checkpoint trusts the executor's receipt key; their audiences are equal;

    the agent proposes for the executor's account and region.

    A service whose settings do not load here is a warning, unless named with --service.

    Example: airlock doctor --service checkpoint --service executor
    """
    report = Report()
    loaded = _load_settings(report, set(service or ()))
    receipt_keys = trusted = None
    if loaded.checkpoint is not None:
        _checkpoint_keys(report, loaded.checkpoint.keys_dir)
        receipt_keys = _receipt_keys(report, loaded.checkpoint)
    if loaded.executor is not None:
        _private_file(
            report, "keys.receipt", loaded.executor.receipt_key_path, "airlock executor keygen"
        )
        trusted = _trusted_keys(report, loaded.executor.trusted_keys_path)
    if loaded.checkpoint is not None and loaded.executor is not None:
        if receipt_keys is not None and loaded.checkpoint.receipt_keys_path is not None:
            _receipt_trust(
                report, receipt_keys, loaded.checkpoint.receipt_keys_path, loaded.executor
            )
        _audience(report, loaded.checkpoint, loaded.executor)
    for name, cloud in (("agent", loaded.agent), ("executor", loaded.executor)):
        if cloud is not None:
            for status, check, detail in settings_checks(name, cloud):
                report.add(status, check, detail)
    if loaded.agent is not None and loaded.executor is not None:
        _account_binding(report, loaded.agent, loaded.executor)
        _production_tags(report, loaded.agent, loaded.executor)
    _session_file(report)
    if loaded.checkpoint is not None:
        _database(report, "database.checkpoint", loaded.checkpoint.database_url)
    if loaded.executor is not None:
        _database(report, "database.executor", loaded.executor.database_url)
    skew = loaded.executor.skew if loaded.executor is not None else _DEFAULT_SKEW
    checkpoint_url, ca_file = _checkpoint_url(url, loaded)
    executor_trust = None
    if loaded.executor is not None and trusted is not None:
        executor_trust = (loaded.executor.trusted_keys_path, trusted)
    checkpoint_check(report, checkpoint_url, skew, time.time, ca_file, trusted=executor_trust)
    typer.echo(f"{report.failed} failed, {report.warned} warnings, {len(report.checks)} checks")
    if report.failed:
        raise typer.Exit(1)
