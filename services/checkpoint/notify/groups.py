"""Groups of people, the routes rules name, and ``[notify.people]``: the policy TOML's
part of routing (docs/notifications.md#routing-slas-and-escalation). Pure: it parses and
checks, reads no file and no database.

A rule's route names an ordered list of groups: the first is asked, each next one is
added when the one before lets the rule's SLA pass. A channel that a rule or a group
names is *routed*: it is sent only the events of proposals routed to it, never every
event as an unnamed (broadcast) channel is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from services.checkpoint.errors import ConfigError

__all__ = [
    "PERSON_PREFIX",
    "Group",
    "People",
    "Route",
    "Routing",
    "parse_duration",
    "parse_groups",
    "parse_people",
    "parse_route",
]

#: The host of Slack's incoming webhooks: the one a personal URL may name by default.
SLACK_HOSTS: Final = ("hooks.slack.com",)
#: A delivery to one person is made on the channel ``person:<username>``.
PERSON_PREFIX: Final = "person:"
_NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,63}")
#: A user name as ``airlock users add`` takes it.
_USER: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_DURATION: Final = re.compile(r"([1-9][0-9]{0,6})([smhd])")
_UNIT: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MAX_GROUPS: Final = 8
_MAX_MEMBERS: Final = 500
#: The shortest SLA: the sweeper runs every 15 s, so a shorter one could not be kept.
SLA_MIN: Final = 60


@dataclass(frozen=True, slots=True)
class Group:
    """``[groups.NAME]``: its members, and the channels that reach a member who has set
    no notification preference of their own (the group's default)."""

    name: str
    members: frozenset[str]
    notify: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Route:
    """A rule's ``route``, ``sla`` and ``notify``."""

    groups: tuple[str, ...]
    sla: int | None = None
    notify: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class People:
    """``[notify.people]``: how a person's own preference is delivered."""

    #: The email channel whose server (and sign-in, and sender) sends a person's mail.
    email_via: str | None = None
    #: The hosts a personal Slack incoming-webhook URL may name (https only).
    slack_hosts: tuple[str, ...] = SLACK_HOSTS
    #: CA bundle to verify a personal Slack webhook's certificate; None: the system's.
    ca_file: Path | None = None
    #: Whether the policy has ``[notify.people]``: without it no one is sent anything of
    #: their own, whatever they chose.
    enabled: bool = False


@dataclass(frozen=True, slots=True)
class Routing:
    """The groups, each routed rule's route, and ``[notify.people]``."""

    groups: Mapping[str, Group] = field(default_factory=dict)
    routes: Mapping[str, Route] = field(default_factory=dict)
    people: People = field(default_factory=People)

    @property
    def routed_channels(self) -> frozenset[str]:
        """Channels sent only the events of proposals routed to them (and the email
        channel people's own mail goes through, which broadcasts nothing)."""
        named = {c for r in self.routes.values() for c in r.notify}
        named |= {c for g in self.groups.values() for c in g.notify}
        if self.people.email_via is not None:
            named.add(self.people.email_via)
        return frozenset(named)


def parse_duration(value: Any, where: str) -> int:
    """Seconds: an integer, or ``"<n>s|m|h|d"`` (``"30m"``, ``"4h"``, ``"2d"``)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and (m := _DURATION.fullmatch(value)):
        return int(m.group(1)) * _UNIT[m.group(2)]
    raise ConfigError(f'{where}: a duration, seconds or like "30m", "4h", "2d"')


def _names(value: Any, where: str, pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, str) and pattern.fullmatch(v) for v in value
    ):
        raise ConfigError(f"{where}: a list of {what}")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where}: a name is listed twice")
    return tuple(value)


def parse_groups(raw: Any, channels: frozenset[str]) -> dict[str, Group]:
    """``[groups]``: ``[groups.NAME] members = [...]``, ``notify = [...]`` (channels)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError("groups: a table of groups")
    groups: dict[str, Group] = {}
    for name, table in raw.items():
        where = f"groups.{name}"
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: a name is 1 to 64 of a-z 0-9 _ -, a letter first")
        if not isinstance(table, Mapping) or set(table) - {"members", "notify"}:
            raise ConfigError(f"{where}: a table of members and notify")
        members = _names(table.get("members"), f"{where}.members", _USER, "user names")
        if not 1 <= len(members) <= _MAX_MEMBERS:
            raise ConfigError(f"{where}.members: 1 to {_MAX_MEMBERS} people")
        notify = _channels(table.get("notify", []), f"{where}.notify", channels)
        groups[name] = Group(name, frozenset(members), notify)
    return groups


def _channels(value: Any, where: str, channels: frozenset[str]) -> tuple[str, ...]:
    names = _names(value, where, _NAME, "channel names")
    unknown = sorted(set(names) - channels)
    if unknown:
        raise ConfigError(f"{where}: no channel {', '.join(unknown)} in [notify.channels]")
    return names


def parse_route(
    rule: str, raw: Mapping[str, Any], groups: Mapping[str, Group], channels: frozenset[str]
) -> Route | None:
    """A rule's ``route``, ``sla`` and ``notify`` (only for ``effect = "approve"``), or
    None when it has none of them."""
    where = f"rule {rule}"
    if not {"route", "sla", "notify"} & set(raw):
        return None
    if raw.get("effect") != "approve":
        raise ConfigError(f"{where}: route, sla and notify apply only to effect = approve")
    route = _names(raw.get("route", []), f"{where}: route", _NAME, "group names")
    unknown = sorted(set(route) - set(groups))
    if unknown:
        raise ConfigError(f"{where}: route names no group {', '.join(unknown)} in [groups]")
    if len(route) > _MAX_GROUPS:
        raise ConfigError(f"{where}: route names at most {_MAX_GROUPS} groups")
    sla = None
    if "sla" in raw:
        sla = parse_duration(raw["sla"], f"{where}: sla")
        if sla < SLA_MIN:
            raise ConfigError(f"{where}: sla is at least {SLA_MIN} seconds")
        if len(route) < 2:
            raise ConfigError(f"{where}: sla needs a next group in route to escalate to")
    notify = _channels(raw.get("notify", []), f"{where}: notify", channels)
    return Route(route, sla, notify)


def parse_people(raw: Any, email_channels: frozenset[str]) -> People:
    """``[notify.people]``: ``email_via`` (an email channel), ``slack_hosts``, ``ca_file``."""
    if raw is None:
        return People()
    if not isinstance(raw, Mapping) or set(raw) - {"email_via", "slack_hosts", "ca_file"}:
        raise ConfigError("notify.people: a table of email_via, slack_hosts, ca_file")
    via = raw.get("email_via")
    if via is not None and via not in email_channels:
        raise ConfigError("notify.people.email_via: the name of an email channel")
    hosts = raw.get("slack_hosts", list(SLACK_HOSTS))
    if not isinstance(hosts, list) or not all(
        isinstance(h, str) and re.fullmatch(r"[a-z0-9.-]{1,253}(:[0-9]{1,5})?", h) for h in hosts
    ):
        raise ConfigError("notify.people.slack_hosts: a list of host names")
    ca_file = raw.get("ca_file")
    if ca_file is not None and (not isinstance(ca_file, str) or not ca_file):
        raise ConfigError("notify.people.ca_file: a file path")
    return People(via, tuple(hosts), None if ca_file is None else Path(ca_file), enabled=True)
