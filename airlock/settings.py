"""Settings for every Airlock process: one class per service, all read from ``AIRLOCK_*``.

Each service reads only its own class, so a service's process never needs another
service's secrets in its environment. Dev defaults (embedded SQLite URLs, localhost
devcloud credentials) are refused unless ``AIRLOCK_ENV=dev``: a production process that
forgot a setting must fail at start, not run on a demo secret.

Every setting is documented in ``docs/configuration.md`` (``airlock config --markdown``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from airlock._setting_files import FileValueSource
from airlock.asgi import LOOPBACK_HOSTS, host_name
from airlock.tls import CAFileError, ca_file_context

#: The kernel's region id form (airlock.protocol RegionId).
_REGION = re.compile(r"[a-z0-9]+(-[a-z0-9]+){0,5}")
# AWS's formats, as airlock.protocol.check_target holds an action to them.
_AWS_ACCOUNT = re.compile(r"[0-9]{12}")
_AWS_REGION = re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}")
#: The account every request to a local moto server lands in.
MOTO_ACCOUNT: Final = "123456789012"

__all__ = [
    "DEVCLOUD_READ_KEY",
    "DEVCLOUD_WRITE_KEY",
    "DEV_GATE_KEYS_PATH",
    "DEV_HEARTBEAT_PATH",
    "DEV_RECEIPT_KEYS_PATH",
    "DEV_UP_STATE_PATH",
    "DOCUMENTED",
    "MOTO_ACCOUNT",
    "AgentSettings",
    "CheckpointSettings",
    "CloudSettings",
    "DevcloudSettings",
    "Env",
    "ExecutorSettings",
    "ServiceSettings",
    "WebappSettings",
    "answered_hosts",
    "is_dev",
    "up_ports",
]

Env = Literal["dev", "prod"]


class ServiceSettings(BaseSettings):
    """Base for each service's settings class.

    Subclasses set ``env_prefix="AIRLOCK_<SERVICE>_"`` in their ``model_config``. Each
    setting may instead be given as ``AIRLOCK_<SERVICE>_<NAME>_FILE``, the path of a file
    holding its value (airlock._setting_files): how containers receive secrets.
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # ``X_FILE`` may come from the environment or .env, and conflicts with ``X`` from
        # either; the order between the three is moot, as a setting given twice is refused.
        given: dict[str, str | None] = {}
        if isinstance(dotenv_settings, DotEnvSettingsSource):
            given.update(dotenv_settings.env_vars)
        if isinstance(env_settings, EnvSettingsSource):
            given.update(env_settings.env_vars)
        files = FileValueSource(settings_cls, given)
        return init_settings, env_settings, files, dotenv_settings, file_secret_settings

    #: ``dev`` allows the embedded demo defaults; anything else refuses them. Read from
    #: ``AIRLOCK_ENV`` whatever the subclass's prefix is.
    env: Env = Field(default="prod", validation_alias=AliasChoices("AIRLOCK_ENV"))

    def filled_in(self) -> dict[str, Any]:
        """The fields the service does not use as they are but fills in after validation
        (``account_or_default()``, ``cloud_credentials()``…), with the value it uses: what
        ``airlock config`` shows for them. Secrets stay ``SecretStr``."""
        return {}


def is_dev(settings: ServiceSettings) -> bool:
    return settings.env == "dev"


def _readable_ca_file(cls: type[ServiceSettings], value: Path | None) -> Path | None:
    """A ``checkpoint_ca_file`` validator: the file must load as a CA bundle now, so a
    bad one stops the start naming the variable and the path, instead of failing (or,
    worse, being passed over) at the first call to the checkpoint."""
    if value is None:
        return None
    try:
        ca_file_context(value)
    except CAFileError as exc:
        name = f"{cls.model_config.get('env_prefix', '')}CHECKPOINT_CA_FILE"
        raise ValueError(f"{name}={exc.path}: {exc.reason}") from None
    return value


def _ca_file_needs_https(settings: ServiceSettings, url: str | None, ca_file: Path | None) -> None:
    # An http URL would never use the CA file: whoever set one expects TLS, so say so.
    if ca_file is not None and not (url or "").startswith("https://"):
        prefix = settings.model_config.get("env_prefix", "")
        raise ValueError(
            f"{prefix}CHECKPOINT_CA_FILE is set but {prefix}CHECKPOINT_URL is not an https URL"
        )


#: Where ``airlock up`` (state in ``.airlock/``) writes the executor's receipt public key
#: set, and so the checkpoint's receipt key set in dev when none is configured.
DEV_RECEIPT_KEYS_PATH = Path(".airlock/receipt-keys.json")
#: Where the checkpoint looks for the gates' receipt key sets in dev when none is
#: configured (used only when the file is there).
DEV_GATE_KEYS_PATH = Path(".airlock/gate-keys.json")


#: Where ``airlock up`` has its executor write the heartbeat, and so where
#: ``airlock executor health`` looks in dev when no path is configured. The executor
#: itself writes none unless told (``AIRLOCK_EXECUTOR_HEARTBEAT_PATH``): a dev executor
#: run anywhere else would warn on every turn that ``.airlock/`` is missing.
DEV_HEARTBEAT_PATH = Path(".airlock/executor.heartbeat")


#: What a running ``airlock up`` serves (``airlock/cli/_up.py`` writes it in its state):
#: the dev defaults take their ports from it, so ``up --checkpoint-port 8887`` and a later
#: ``AIRLOCK_ENV=dev airlock doctor`` (or ``config``, or a dev agent) agree.
DEV_UP_STATE_PATH = Path(".airlock/up.json")
_DEV_PORTS: Final = {"checkpoint": 8787, "webapp": 3000, "devcloud": 8788}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def up_ports(path: Path = DEV_UP_STATE_PATH) -> dict[str, int]:
    """The ports the ``airlock up`` recorded at ``path`` serves, by service name; empty
    when none runs there (no file, marked stopped, its process gone, or unreadable)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(value, dict) or value.get("status") != "running":
        return {}
    pid, ports = value.get("pid"), value.get("ports")
    if type(pid) is not int or pid <= 0 or not isinstance(ports, dict) or not _pid_alive(pid):
        return {}
    return {
        name: port
        for name in _DEV_PORTS
        if type(port := ports.get(name)) is int and 0 < port < 65536
    }


#: A key of the validated data that asks a default for its documented value: the
#: configuration table (``airlock config --markdown``) must not follow a running ``up``.
DOCUMENTED: Final = "__documented__"


def _dev_port(data: dict[str, Any], name: str) -> int:
    """A default port: in dev, the one a running ``airlock up`` serves; else the usual."""
    fallback = _DEV_PORTS[name]
    if data.get("env") != "dev" or data.get(DOCUMENTED):
        return fallback
    return up_ports().get(name, fallback)


def _dev_checkpoint_url(data: dict[str, Any]) -> str:
    return f"http://127.0.0.1:{_dev_port(data, 'checkpoint')}"


#: Listen addresses that are no name a client uses (every interface).
_WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 (compared, never bound)


def _host_list(value: object) -> object:
    """An ``allowed_hosts`` value from the environment: a JSON list, or names separated
    by commas."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return value


def _host_names(value: tuple[str, ...]) -> tuple[str, ...]:
    # An IPv6 literal may be given with or without its brackets.
    names = [host_name(f"[{h.strip('[]')}]" if ":" in h else h) for h in value]
    bad = [h for h, name in zip(value, names, strict=True) if name is None]
    if bad or not value:
        raise ValueError(f"not host names: {bad or 'none given'} (e.g. localhost,127.0.0.1)")
    return tuple(name for name in names if name is not None)


def answered_hosts(allowed: tuple[str, ...], listen: str) -> tuple[str, ...]:
    """The ``Host`` names a server answers: ``allowed``, and the address it listens on
    unless that is a wildcard (0.0.0.0, ::)."""
    listen = listen.lower().strip("[]")
    if listen in _WILDCARD_ADDRESSES or listen in allowed:
        return allowed
    return (*allowed, listen)


def _receipt_keys_default(data: dict[str, Any]) -> Path | None:
    # ``env`` is declared first (in the base class), so it is validated by now.
    return DEV_RECEIPT_KEYS_PATH if data.get("env") == "dev" else None


def _gate_keys_default(data: dict[str, Any]) -> Path | None:
    return DEV_GATE_KEYS_PATH if data.get("env") == "dev" else None


class CheckpointSettings(ServiceSettings):
    """The checkpoint (``AIRLOCK_CHECKPOINT_*``): its database, keys, policy and windows.

    The keys directory holds the private signing key; no other service's settings name it.
    """

    model_config = SettingsConfigDict(
        env_prefix="AIRLOCK_CHECKPOINT_", env_file=".env", extra="ignore", frozen=True
    )

    #: SQLAlchemy URL of the checkpoint's own database (never the executor's).
    database_url: str = "sqlite:///.airlock/checkpoint.db"
    #: Directory of signing keys and their manifest (``airlock keys generate``).
    keys_dir: Path = Path(".airlock/keys")
    #: Policy TOML; default: the policy shipped with the checkpoint.
    policy_path: Path | None = None
    #: The executor's receipt public key set (JSON key set, ``executor keygen --public``).
    #: Every reported outcome must verify against it; required outside dev (unset, the
    #: checkpoint refuses to start). In dev it defaults to the one ``airlock up`` writes.
    receipt_keys_path: Path | None = Field(default_factory=_receipt_keys_default)
    #: The gates' receipt public key sets: a JSON file ``{"<audience>": <key set>}``,
    #: read again when it changes. A gate's outcome for a tool call must verify against
    #: its audience's set. Unset: no gate may report. In dev it defaults to
    #: ``.airlock/gate-keys.json`` when that file is there.
    gate_keys: Path | None = Field(default_factory=_gate_keys_default)
    #: The executor audience written into every statement; must equal the executor's
    #: ``AIRLOCK_EXECUTOR_AUDIENCE``. Required outside dev (the dev default is refused).
    audience: str = "airlock-executor/dev"
    #: How long a proposal waits for votes, seconds (docs/protocol.md#proposals: 24 h).
    approval_window: int = Field(default=24 * 3600, gt=0)
    #: Approval lifetime ``expires_at - issued_at``, seconds (docs/protocol.md#proposals: 15 min).
    execution_window: int = Field(default=15 * 60, gt=0)
    #: Lifetime of a login session token, seconds (however active it is).
    session_ttl: int = Field(default=8 * 3600, gt=0)
    #: A person's session ends after this many seconds without use (web app and CLI).
    session_idle: int = Field(default=30 * 60, gt=0)
    #: Failed logins in a row before an account locks: a last resort, as each (client
    #: address, account) pair counts at most 3 of them (SECURITY.md, sign-in).
    lockout_threshold: int = Field(default=100, gt=0)
    #: How long a locked account stays locked, seconds (``airlock users unlock`` ends it).
    lockout_seconds: int = Field(default=15 * 60, gt=0)
    #: Addresses whose ``X-Forwarded-For`` names the client of a sign-in (the web app's,
    #: a TLS proxy's): comma-separated or a JSON list. Empty: the socket's peer is the
    #: client, and the header is ignored.
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = ()
    #: Longest long-poll a feed request may ask for, seconds.
    feed_max_wait: int = Field(default=30, gt=0)
    #: Address the API listens on (``airlock checkpoint --host``).
    host: str = "127.0.0.1"
    #: Port the API listens on.
    port: int = Field(default_factory=lambda data: _dev_port(data, "checkpoint"), gt=0, lt=65536)
    #: Seconds between writes of repeated refusals, aggregated per caller and code (the
    #: first of each is written at once); a crash loses at most this long of counts.
    refusal_interval: int = Field(default=60, gt=0, le=3600)
    #: Refused requests a token may have in a row before it is refused E_RATE_LIMITED.
    refusal_burst: int = Field(default=60, gt=0)
    #: Refused requests a token earns back each minute once over ``refusal_burst``.
    refusals_per_minute: int = Field(default=60, gt=0)
    #: Names clients reach the API by (comma-separated or a JSON list); a request with
    #: any other ``Host`` is refused 400 (DNS rebinding). ``host`` is added unless a
    #: wildcard. Behind a proxy or in compose, add the name it uses (``checkpoint``).
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = LOOPBACK_HOSTS

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _allowed_hosts_list(cls, value: object) -> object:
        return _host_list(value)

    @field_validator("allowed_hosts", mode="after")
    @classmethod
    def _allowed_hosts_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _host_names(value)

    def filled_in(self) -> dict[str, Any]:
        out = super().filled_in()
        hosts = answered_hosts(self.allowed_hosts, self.host)
        if hosts != self.allowed_hosts:
            out["allowed_hosts"] = hosts
        return out

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return tuple(part.strip() for part in text.split(",") if part.strip())
        return value

    @field_validator("trusted_proxies", mode="after")
    @classmethod
    def _proxy_addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        try:
            return tuple(str(ipaddress.ip_address(v)) for v in value)
        except ValueError:
            raise ValueError(f"not IP addresses: {list(value)}") from None

    @model_validator(mode="after")
    def _no_dev_defaults_in_prod(self) -> CheckpointSettings:
        if is_dev(self):
            return self
        if "database_url" not in self.model_fields_set:
            raise ValueError("AIRLOCK_CHECKPOINT_DATABASE_URL must be set outside AIRLOCK_ENV=dev")
        # Every approval would name the dev executor: a production executor refuses them
        # all (E_AUDIENCE), which fails closed, but only once people have approved.
        if self.audience == "airlock-executor/dev":
            raise ValueError("AIRLOCK_CHECKPOINT_AUDIENCE must be set outside AIRLOCK_ENV=dev")
        return self


# --------------------------------------------------------------------------- cloud

#: devcloud's two demo access keys (id, secret), like two RAM users: one may only read,
#: the other may also stop and delete. Public on purpose; refused outside AIRLOCK_ENV=dev.
DEVCLOUD_READ_KEY = ("LTAIdevcloudRead0000001", "devcloud-read-secret-NOT-FOR-PRODUCTION")
DEVCLOUD_WRITE_KEY = ("LTAIdevcloudWrite000001", "devcloud-write-secret-NOT-FOR-PRODUCTION")
_DEVCLOUD_ENDPOINT = "127.0.0.1:8788"
#: The account id devcloud reports (services/devcloud ACCOUNT_ID).
_DEVCLOUD_ACCOUNT = "5123456789012345"


class CloudSettings(ServiceSettings):
    """Cloud access for a service that talks to Alibaba Cloud (the agent, the executor).

    A service's settings class subclasses this with its own ``env_prefix``, so each
    service has its own credential (``AIRLOCK_AGENT_CLOUD_ACCESS_KEY_ID`` is the read key,
    ``AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID`` the write key). With ``AIRLOCK_ENV=dev`` and
    nothing set, :meth:`cloud_credentials` and :meth:`cloud_endpoint_or_default` resolve
    to the local devcloud and its ``dev_access`` key; otherwise a missing key is an error
    at start.
    """

    #: Which devcloud key a dev process gets when none is configured.
    dev_access: ClassVar[Literal["read", "write"]] = "read"

    #: Endpoint for every product (``host[:port]``); unset → the SDK's regional endpoints.
    cloud_endpoint: str | None = None
    #: ``https`` for Alibaba Cloud; ``http`` only for a local devcloud.
    cloud_protocol: Literal["http", "https"] = "https"
    #: This service's own access key id (read key for the agent, write key for the executor).
    cloud_access_key_id: str = ""
    #: Secret of that access key.
    cloud_access_key_secret: SecretStr = SecretStr("")
    #: Regions this service covers: comma-separated (`ap-southeast-1,cn-hangzhou`) or a JSON list.
    cloud_regions: Annotated[tuple[str, ...], NoDecode] = ("ap-southeast-1",)
    #: Connect timeout of every SDK call, milliseconds.
    cloud_connect_timeout_ms: int = Field(default=5_000, gt=0)
    #: Read timeout of every SDK call, milliseconds; a timed-out write is probed, not retried.
    cloud_read_timeout_ms: int = Field(default=10_000, gt=0)
    #: AWS: a named profile of the shared config files to take credentials from, instead
    #: of ``cloud_access_key_id`` (which, when set, is the AWS access key id).
    aws_profile: str | None = None
    #: AWS: an IAM role ARN these credentials assume (STS AssumeRole) for every call; the
    #: agent's and the executor's are different roles.
    aws_role_arn: str | None = None
    #: AWS: one endpoint URL for every service (a local moto server); unset → AWS's own.
    aws_endpoint_url: str | None = None

    @field_validator("cloud_regions", mode="before")
    @classmethod
    def _regions(cls, value: object) -> object:
        # The environment gives text: a JSON list, or names separated by commas.
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return tuple(part.strip() for part in text.split(",") if part.strip())
        return value

    @field_validator("cloud_regions", mode="after")
    @classmethod
    def _region_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [r for r in value if _REGION.fullmatch(r) is None]
        if bad or not value:
            raise ValueError(f"not region ids: {bad or 'none given'} (e.g. ap-southeast-1)")
        return value

    @model_validator(mode="after")
    def _cloud_key_outside_dev(self) -> CloudSettings:
        if self.aws_endpoint_url is not None and not self.aws_endpoint_url.startswith(
            ("http://", "https://")
        ):
            raise ValueError("the AWS endpoint URL must be an http(s) URL")
        if is_dev(self):
            return self
        if self.aws_profile or self.aws_role_arn:
            return self  # AWS credentials from a profile or the default chain, then a role
        if not self.cloud_access_key_id or not self.cloud_access_key_secret.get_secret_value():
            raise ValueError("a cloud access key id and secret must be set outside AIRLOCK_ENV=dev")
        if self.cloud_access_key_id in (DEVCLOUD_READ_KEY[0], DEVCLOUD_WRITE_KEY[0]):
            raise ValueError("the devcloud demo key is refused outside AIRLOCK_ENV=dev")
        return self

    def filled_in(self) -> dict[str, Any]:
        # Derived from the very methods the services call, so the two cannot drift.
        out = super().filled_in()
        key_id, secret = self.cloud_credentials()
        if key_id != self.cloud_access_key_id:
            out["cloud_access_key_id"] = key_id
            out["cloud_access_key_secret"] = SecretStr(secret)
        endpoint, protocol = self.cloud_endpoint_or_default()
        if endpoint != self.cloud_endpoint:
            out["cloud_endpoint"] = endpoint
        if protocol != self.cloud_protocol:
            out["cloud_protocol"] = protocol
        return out

    def cloud_credentials(self) -> tuple[str, str]:
        """(access key id, secret); the devcloud demo key only in dev when none is set."""
        if self.cloud_access_key_id:
            return self.cloud_access_key_id, self.cloud_access_key_secret.get_secret_value()
        if not is_dev(self):  # unreachable after validation; fail closed anyway
            raise ValueError("no cloud access key configured")
        return DEVCLOUD_WRITE_KEY if self.dev_access == "write" else DEVCLOUD_READ_KEY

    def cloud_endpoint_or_default(self) -> tuple[str | None, str]:
        """(endpoint, protocol); devcloud over http in dev when no endpoint is set."""
        if self.cloud_endpoint is None and is_dev(self) and not self.cloud_access_key_id:
            port = up_ports().get("devcloud")
            return (_DEVCLOUD_ENDPOINT if port is None else f"127.0.0.1:{port}"), "http"
        return self.cloud_endpoint, self.cloud_protocol


class DevcloudSettings(ServiceSettings):
    """devcloud (``AIRLOCK_DEVCLOUD_*``), the local Alibaba Cloud double for dev and tests.

    devcloud is never part of a production deployment: it refuses to load unless
    ``AIRLOCK_ENV=dev``. Its admin API (write log, fault injection, out-of-band changes)
    stays off unless ``enable_admin`` is true and ``admin_token`` is set.
    """

    model_config = SettingsConfigDict(
        env_prefix="AIRLOCK_DEVCLOUD_", env_file=".env", extra="ignore", frozen=True
    )

    #: Address devcloud listens on.
    host: str = "127.0.0.1"
    #: Port devcloud listens on.
    port: int = Field(default_factory=lambda data: _dev_port(data, "devcloud"), gt=0, lt=65536)
    #: SQLite file holding the fleet, the write log and the injected faults.
    db_path: Path = Path(".airlock/devcloud.db")
    #: Access key id of the read-only key (Describe* and metrics only).
    read_key_id: str = DEVCLOUD_READ_KEY[0]
    #: Secret of the read-only key.
    read_key_secret: SecretStr = SecretStr(DEVCLOUD_READ_KEY[1])
    #: Access key id of the write key (Stop/Delete and Describe*).
    write_key_id: str = DEVCLOUD_WRITE_KEY[0]
    #: Secret of the write key.
    write_key_secret: SecretStr = SecretStr(DEVCLOUD_WRITE_KEY[1])
    #: Serve the test-only admin API (write log, faults, out-of-band changes).
    enable_admin: bool = False
    #: Bearer token of the admin API; required when ``enable_admin`` is true.
    admin_token: SecretStr | None = None
    #: Seconds an instance spends in Stopping before it reports Stopped.
    transition_seconds: float = Field(default=5.0, ge=0)
    #: Largest accepted clock skew of a signed request (``x-acs-date``), seconds.
    max_clock_skew: int = Field(default=900, gt=0)
    #: The account id devcloud serves (in metric datapoints' ``userId``); set it to the
    #: ``AIRLOCK_AGENT_ACCOUNT`` and ``AIRLOCK_EXECUTOR_ACCOUNT`` it stands in for.
    account: str = Field(default=_DEVCLOUD_ACCOUNT, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    #: On start, if this database was never seeded, seed a fleet of this many ECS instances
    #: (and a tenth as many RDS), as ``devcloud seed`` would; 0 seeds nothing.
    seed_instances: int = Field(default=0, ge=0, le=100_000)
    #: Regions of that fleet: comma-separated or a JSON list.
    seed_regions: Annotated[tuple[str, ...], NoDecode] = ("ap-southeast-1",)

    @field_validator("seed_regions", mode="before")
    @classmethod
    def _seed_regions(cls, value: object) -> object:
        return CloudSettings._regions(value)

    @field_validator("seed_regions", mode="after")
    @classmethod
    def _seed_region_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return CloudSettings._region_names(value)

    @model_validator(mode="after")
    def _dev_only(self) -> DevcloudSettings:
        if not is_dev(self):
            raise ValueError("devcloud is a dev/test double: it runs only with AIRLOCK_ENV=dev")
        if self.enable_admin and (
            self.admin_token is None or len(self.admin_token.get_secret_value()) < 16
        ):
            raise ValueError("the devcloud admin API needs an admin token of 16+ characters")
        if self.read_key_id == self.write_key_id:
            raise ValueError("the read and write keys must differ")
        return self


# --------------------------------------------------------------------------- webapp


class WebappSettings(ServiceSettings):
    """The web app (``AIRLOCK_WEBAPP_*``): where it listens and which checkpoint it calls.

    It names no secret: the web app holds nothing but each person's own checkpoint
    session, and that lives in the person's cookie, never in the server.
    """

    model_config = SettingsConfigDict(
        env_prefix="AIRLOCK_WEBAPP_", env_file=".env", extra="ignore", frozen=True
    )

    #: Base URL of the checkpoint API (the part before ``/v1``).
    checkpoint_url: str = Field(default_factory=_dev_checkpoint_url)
    #: PEM bundle of the CA(s) that issued the checkpoint's TLS certificate; set, exactly
    #: these are trusted instead of certifi's. ``SSL_CERT_FILE`` is not read.
    checkpoint_ca_file: Path | None = None
    #: Seconds to wait for the checkpoint on each request.
    checkpoint_timeout: float = Field(default=10.0, gt=0)
    #: Address the web app listens on.
    host: str = "127.0.0.1"
    #: Port the web app listens on.
    port: int = Field(default_factory=lambda data: _dev_port(data, "webapp"), gt=0, lt=65536)
    #: Mark cookies ``Secure``. Unset: on outside dev, off in dev. A request that arrives
    #: over HTTPS always gets Secure cookies whatever this says.
    secure_cookies: bool | None = None
    #: How often the queue page asks for new proposals, seconds.
    queue_poll_seconds: int = Field(default=5, gt=0, le=3600)
    #: Names people reach the web app by (comma-separated or a JSON list); a request
    #: with any other ``Host`` is refused 400 (DNS rebinding). ``host`` is added unless
    #: a wildcard. Behind a proxy, add the name people type.
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = LOOPBACK_HOSTS

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _allowed_hosts_list(cls, value: object) -> object:
        return _host_list(value)

    @field_validator("allowed_hosts", mode="after")
    @classmethod
    def _allowed_hosts_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _host_names(value)

    @model_validator(mode="after")
    def _no_dev_defaults_in_prod(self) -> WebappSettings:
        if not is_dev(self) and "checkpoint_url" not in self.model_fields_set:
            raise ValueError("AIRLOCK_WEBAPP_CHECKPOINT_URL must be set outside AIRLOCK_ENV=dev")
        if not self.checkpoint_url.startswith(("http://", "https://")):
            raise ValueError("AIRLOCK_WEBAPP_CHECKPOINT_URL must be an http(s) URL")
        _ca_file_needs_https(self, self.checkpoint_url, self.checkpoint_ca_file)
        return self

    _check_ca_file = field_validator("checkpoint_ca_file")(_readable_ca_file)

    def filled_in(self) -> dict[str, Any]:
        out = super().filled_in()
        if self.secure_cookies is None:
            out["secure_cookies"] = self.cookies_secure()
        hosts = answered_hosts(self.allowed_hosts, self.host)
        if hosts != self.allowed_hosts:
            out["allowed_hosts"] = hosts
        return out

    def cookies_secure(self) -> bool:
        return (not is_dev(self)) if self.secure_cookies is None else self.secure_cookies


class ExecutorSettings(CloudSettings):
    """The executor (``AIRLOCK_EXECUTOR_*``): its ledger, trust root, receipt key, binding,
    and the **write** cloud key. It names no approval signing key: the executor verifies
    with public keys only and signs nothing but its own receipts.
    """

    model_config = SettingsConfigDict(
        env_prefix="AIRLOCK_EXECUTOR_", env_file=".env", extra="ignore", frozen=True
    )
    dev_access: ClassVar[Literal["read", "write"]] = "write"

    #: SQLAlchemy URL of the executor's own ledger database (never the checkpoint's).
    database_url: str = "sqlite:///.airlock/executor.db"
    #: The trusted approval public key set (JSON key set from the checkpoint); re-read
    #: when the file changes, so a re-export after a revocation needs no restart.
    trusted_keys_path: Path = Path(".airlock/trusted-keys.json")
    #: The executor's own Ed25519 receipt key (PKCS#8 PEM, mode 0600; ``executor keygen``).
    receipt_key_path: Path = Path(".airlock/executor-receipt.pem")
    #: This executor's audience; approvals addressed elsewhere are refused (E_AUDIENCE).
    #: Required outside dev (the dev default is refused).
    audience: str = "airlock-executor/dev"
    #: The one provider this executor may write to (E_ACCOUNT otherwise): ``alibaba``
    #: (AIRLOCK_EXECUTOR_CLOUD_* is an Alibaba Cloud key) or ``aws`` (an AWS access key,
    #: or AIRLOCK_EXECUTOR_AWS_PROFILE / _AWS_ROLE_ARN; the account is 12 digits).
    provider: Literal["alibaba", "aws"] = "alibaba"
    #: The one cloud account this executor may write to (dev: devcloud's; E_ACCOUNT).
    account: str = ""
    #: The one region this executor may write to (E_ACCOUNT otherwise).
    region: str = "ap-southeast-1"
    #: Longest approval lifetime accepted, seconds (E_TTL beyond it).
    max_ttl: int = Field(default=15 * 60, gt=0)
    #: Tolerated clock skew against the checkpoint's ``not_before``, seconds.
    skew: int = Field(default=30, ge=0)
    #: How long a worker owns a ledger row; must outlast the longest cloud call.
    lease_seconds: int = Field(default=120, gt=0)
    #: Seconds between recovery passes in daemon mode.
    recover_every: int = Field(default=30, gt=0)
    #: Longest wait of one feed long-poll, or on an empty inbox (looked at every 0.1 s),
    #: seconds; never past the next recovery pass. At most 600, as the feed allows.
    poll_wait: int = Field(default=5, gt=0, le=600)  # GET /v1/feed answers 422 beyond 600
    #: Bundles the daemon executes at once (at most 8), those naming one resource one
    #: after another in feed order; 1 executes one at a time.
    parallel: int = Field(default=4, ge=1, le=8)
    #: Directory bundle source for the daemon (``*.json`` files) instead of the feed.
    inbox: Path | None = None
    #: With ``inbox``: a file of revoked approval ids, one per line.
    revocations_path: Path | None = None
    #: Where each terminal outcome's receipt is also written (the ledger keeps them all).
    receipts_dir: Path | None = None
    #: The checkpoint whose feed the daemon follows and to which it reports outcomes.
    checkpoint_url: str | None = None
    #: The executor's service token at the checkpoint (``tokens create --role executor``).
    checkpoint_token: SecretStr = SecretStr("")
    #: PEM bundle of the CA(s) that issued the checkpoint's TLS certificate; set, exactly
    #: these are trusted instead of certifi's. ``SSL_CERT_FILE`` is not read.
    checkpoint_ca_file: Path | None = None
    #: Longest wait between retries when the checkpoint is down, seconds.
    retry_max: int = Field(default=30, gt=0)
    #: A file the daemon touches on every turn of its loop (``airlock executor health``).
    heartbeat_path: Path | None = None
    #: A live tag on one of these keys whose value starts with ``prod_value_prefix``
    #: (case-insensitive) stops the write (E_PRECONDITION): the agent never proposes a
    #: production resource, so such a tag was added after the approval's observation.
    #: Keep equal to the agent's ``AIRLOCK_AGENT_PROD_TAG_KEYS``; ``[]`` turns it off.
    prod_tag_keys: tuple[str, ...] = ("env", "environment")
    #: Value prefix of ``prod_tag_keys`` that marks production (case-insensitive).
    prod_value_prefix: str = "prod"

    @model_validator(mode="after")
    def _executor_checks(self) -> ExecutorSettings:
        if self.lease_seconds * 1000 <= 2 * (
            self.cloud_connect_timeout_ms + self.cloud_read_timeout_ms
        ):
            raise ValueError("lease_seconds must exceed twice the cloud call timeouts")
        if self.checkpoint_url and not self.checkpoint_url.startswith(("http://", "https://")):
            raise ValueError("AIRLOCK_EXECUTOR_CHECKPOINT_URL must be an http(s) URL")
        _ca_file_needs_https(self, self.checkpoint_url, self.checkpoint_ca_file)
        if self.provider == "aws":
            if self.account and _AWS_ACCOUNT.fullmatch(self.account) is None:
                raise ValueError("AIRLOCK_EXECUTOR_ACCOUNT must be 12 digits for provider aws")
            if _AWS_REGION.fullmatch(self.region) is None:
                raise ValueError(f"AIRLOCK_EXECUTOR_REGION {self.region!r} is not an AWS region")
        if is_dev(self):
            return self
        if "database_url" not in self.model_fields_set:
            raise ValueError("AIRLOCK_EXECUTOR_DATABASE_URL must be set outside AIRLOCK_ENV=dev")
        if not self.account:
            raise ValueError("AIRLOCK_EXECUTOR_ACCOUNT must be set outside AIRLOCK_ENV=dev")
        if self.audience == "airlock-executor/dev":
            raise ValueError("AIRLOCK_EXECUTOR_AUDIENCE must be set outside AIRLOCK_ENV=dev")
        return self

    _check_ca_file = field_validator("checkpoint_ca_file")(_readable_ca_file)

    def filled_in(self) -> dict[str, Any]:
        out = super().filled_in()
        if self.account_or_default() != self.account:
            out["account"] = self.account_or_default()
        return out

    def account_or_default(self) -> str:
        """The bound account; in dev when none is set, devcloud's (moto's for aws)."""
        if self.account:
            return self.account
        if not is_dev(self):  # unreachable after validation; fail closed anyway
            raise ValueError("no account configured")
        return MOTO_ACCOUNT if self.provider == "aws" else _DEVCLOUD_ACCOUNT


# The agent's settings are a module of their own (size); imported last, as they build on
# the classes and helpers above, and re-exported here, where every caller looks.
from airlock._settings_agent import AgentSettings  # noqa: E402
