"""The ``[notify]`` table of the policy TOML: where notifications go (docs/notifications.md).

Pure: it parses and checks the table, reads no file. A secret is named by a file path
(``secret_file``, ``url_file``, ``password_file``) and read when the checkpoint starts
(:mod:`.channels`); a secret written inline is refused with :class:`ConfigError`, so a
policy file (hashed, shown, kept in git) never carries one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from services.checkpoint.errors import ConfigError
from services.checkpoint.models import NOTIFY_KINDS

from .groups import Routing, parse_people

__all__ = [
    "DEFAULT_RETRY_DELAYS",
    "Channel",
    "ChannelType",
    "NotifyConfig",
    "parse_notify",
]

ChannelType = Literal["webhook", "slack", "email"]

#: Seconds to wait before each retry (Standard Webhooks' suggested schedule after the
#: first try); past the last, the last again, until the retry window ends.
DEFAULT_RETRY_DELAYS: Final = (5, 300, 1800, 7200, 18000, 36000)
_NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,63}")
#: Keys that would hold a secret inline: the file form is the only one taken.
_INLINE_SECRETS: Final = {
    "secret": "secret_file",
    "password": "password_file",
    "token": "a *_file key",
    "webhook_url": "url_file",
}
_KEYS: Final[dict[str, frozenset[str]]] = {
    "webhook": frozenset({"type", "events", "url", "secret_file", "ca_file"}),
    # A Slack incoming webhook's URL is its secret: anyone holding it may post.
    "slack": frozenset({"type", "events", "url_file", "ca_file"}),
    "email": frozenset(
        {"type", "events", "host", "port", "username", "password_file", "from", "to", "ca_file"}
    ),
}
_TOP: Final = frozenset(
    {
        "proposal_url",
        "timeout",
        "retry_for",
        "retry_delays",
        "expiring_before",
        "channels",
        "people",
    }
)


@dataclass(frozen=True, slots=True)
class Channel:
    """One configured channel; ``secret_file`` holds the webhook's ``whsec_`` secret,
    Slack's incoming-webhook URL, or the SMTP password (none for an open relay)."""

    name: str
    type: ChannelType
    events: frozenset[str]
    secret_file: Path | None
    url: str | None = None  # webhook only
    host: str | None = None  # email only, and below
    port: int = 587
    username: str | None = None
    sender: str | None = None
    to: tuple[str, ...] = ()
    #: CA bundle to verify the receiver's TLS certificate with; None: the system's.
    ca_file: Path | None = None


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    """The whole ``[notify]`` table; empty (no channels) when the policy has none."""

    channels: tuple[Channel, ...] = ()
    #: The web app's page of a proposal, ``{proposal_id}`` once: the link a message carries.
    proposal_url: str | None = None
    #: Seconds one send may take, all of it (connect, TLS, answer).
    timeout: float = 10.0
    #: Seconds a delivery is retried for, from its event; then it is dead.
    retry_for: int = 24 * 3600
    retry_delays: tuple[int, ...] = DEFAULT_RETRY_DELAYS
    #: ``proposal.expiring`` is sent this many seconds before the approval window ends.
    expiring_before: int = 3600
    #: Groups, routed rules and ``[notify.people]`` (the policy sets it: :mod:`.groups`).
    routing: Routing = field(default_factory=Routing)

    def channel(self, name: str) -> Channel | None:
        return next((c for c in self.channels if c.name == name), None)

    def channels_for(self, kind: str) -> tuple[str, ...]:
        """The broadcast channels (named by no rule or group) that want ``kind``."""
        routed = self.routing.routed_channels
        return tuple(c.name for c in self.channels if kind in c.events and c.name not in routed)

    @property
    def active(self) -> bool:
        """Whether anyone may be told anything: a channel, or ``[notify.people]``."""
        return bool(self.channels) or self.routing.people.enabled

    def wants(self, name: str, kind: str) -> bool:
        """Whether channel ``name`` takes events of ``kind``."""
        channel = self.channel(name)
        return channel is not None and kind in channel.events

    @property
    def claim_for(self) -> int:
        """Seconds a claimed delivery is held: longer than a send may take, so only a
        worker that died mid-send lets it go to another (which sends it again)."""
        return int(self.timeout) * 2 + 2


def parse_notify(raw: Any) -> NotifyConfig:
    """Check the ``[notify]`` table; raise :class:`ConfigError` naming what is wrong."""
    if raw is None:
        return NotifyConfig()
    if not isinstance(raw, Mapping):
        raise ConfigError("notify: must be a table")
    unknown = set(raw) - _TOP
    if unknown:
        raise ConfigError(f"notify: unknown keys {sorted(unknown)}")
    url = raw.get("proposal_url")
    if url is not None and (
        not isinstance(url, str)
        or url.count("{proposal_id}") != 1
        or url.replace("{proposal_id}", "").count("{") > 0
        or urlsplit(url).scheme not in ("http", "https")
    ):
        raise ConfigError("notify.proposal_url: an http(s) URL naming {proposal_id} once")
    timeout = raw.get("timeout", 10)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 60:
        raise ConfigError("notify.timeout: seconds, more than 0 and at most 60")
    retry_for = _positive_int(raw.get("retry_for", 24 * 3600), "notify.retry_for")
    expiring = _positive_int(raw.get("expiring_before", 3600), "notify.expiring_before")
    delays = raw.get("retry_delays", list(DEFAULT_RETRY_DELAYS))
    if not isinstance(delays, list) or not delays:
        raise ConfigError("notify.retry_delays: a list of seconds")
    checked = tuple(_positive_int(d, "notify.retry_delays") for d in delays)
    tables = raw.get("channels", {})
    if not isinstance(tables, Mapping):
        raise ConfigError("notify.channels: must be a table of channels")
    channels = tuple(_channel(name, value) for name, value in tables.items())
    people = parse_people(
        raw.get("people"), frozenset(c.name for c in channels if c.type == "email")
    )
    return NotifyConfig(
        channels=channels,
        proposal_url=url,
        timeout=float(timeout),
        retry_for=retry_for,
        retry_delays=checked,
        expiring_before=expiring,
        routing=Routing(people=people),
    )


def _positive_int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{where}: a whole number of seconds, more than 0")
    return value


def _channel(name: str, raw: Any) -> Channel:
    where = f"notify.channels.{name}"
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{where}: a name is 1 to 64 of a-z 0-9 _ -, a letter first")
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a table")
    for key, instead in _INLINE_SECRETS.items():
        if key in raw:
            raise ConfigError(
                f"{where}.{key}: a secret is never written in the policy; name a file "
                f"with {instead}"
            )
    kind = raw.get("type")
    if kind not in _KEYS:
        raise ConfigError(f"{where}.type: one of webhook, slack, email")
    if kind == "slack" and "url" in raw:
        raise ConfigError(
            f"{where}.url: a Slack webhook URL is a secret; name a file with url_file"
        )
    unknown = set(raw) - _KEYS[kind]
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    events = raw.get("events", list(NOTIFY_KINDS))
    if not isinstance(events, list) or not events or not set(events) <= set(NOTIFY_KINDS):
        raise ConfigError(f"{where}.events: a list of {', '.join(NOTIFY_KINDS)}")
    secret = _path(raw, "secret_file" if kind == "webhook" else "url_file", where)
    if kind == "webhook":
        url = raw.get("url")
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
            raise ConfigError(f"{where}.url: an http(s) URL")
        if secret is None:
            raise ConfigError(f"{where}.secret_file: required (every webhook is signed)")
        return Channel(
            name,
            "webhook",
            frozenset(events),
            secret,
            url=url,
            ca_file=_path(raw, "ca_file", where),
        )
    if kind == "slack":
        if secret is None:
            raise ConfigError(f"{where}.url_file: required (the incoming webhook's URL)")
        ca_file = _path(raw, "ca_file", where)
        return Channel(name, "slack", frozenset(events), secret, ca_file=ca_file)
    return _email(name, raw, frozenset(events), where)


def _email(name: str, raw: Mapping[str, Any], events: frozenset[str], where: str) -> Channel:
    host, sender, to = raw.get("host"), raw.get("from"), raw.get("to")
    if not isinstance(host, str) or not host:
        raise ConfigError(f"{where}.host: the SMTP server's name")
    port = raw.get("port", 587)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ConfigError(f"{where}.port: a TCP port")
    if not isinstance(sender, str) or "@" not in sender:
        raise ConfigError(f"{where}.from: the sender's address")
    if not isinstance(to, list) or not to or not all(isinstance(a, str) and "@" in a for a in to):
        raise ConfigError(f"{where}.to: a list of addresses")
    username = raw.get("username")
    if username is not None and not isinstance(username, str):
        raise ConfigError(f"{where}.username: a string")
    password = _path(raw, "password_file", where)
    if (username is None) != (password is None):
        raise ConfigError(f"{where}: username and password_file go together")
    return Channel(
        name,
        "email",
        events,
        password,
        host=host,
        port=port,
        username=username,
        sender=sender,
        to=tuple(to),
        ca_file=_path(raw, "ca_file", where),
    )


def _path(raw: Mapping[str, Any], key: str, where: str) -> Path | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}.{key}: a file path")
    return Path(value)
