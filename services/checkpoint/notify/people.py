"""Who hears of an event: broadcast channels, a routed proposal's groups and channels,
and people by their own preferences (docs/notifications.md#who-is-told).

:func:`targets` runs in the state change's transaction (reads only). A person's
delivery is made on the channel ``person:<username>``; :class:`PersonSender` reads the
person's preference when it sends, so the outbox never holds an address or a personal
Slack URL, and a changed preference applies to what is still waiting.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from services.checkpoint.models import notify_prefs, users

from .channels import DeliveryError, EmailSender, Sender, SlackSender, _each
from .config import Channel, NotifyConfig
from .groups import PERSON_PREFIX, People
from .routed import route as routed

__all__ = ["PersonSender", "Pref", "person_senders", "slack_url_allowed", "targets"]


@dataclass(frozen=True, slots=True)
class Pref:
    """A person's stored preference."""

    username: str
    events: frozenset[str]
    email: str | None
    slack_url: str | None

    @classmethod
    def from_row(cls, row: Any) -> Pref:
        return cls(str(row.username), frozenset(json.loads(row.events)), row.email, row.slack_url)

    def reachable(self, people: People) -> bool:
        """Whether anything can be sent to this person (an address the checkpoint can use)."""
        return bool(self.slack_url) or (bool(self.email) and people.email_via is not None)


def slack_url_allowed(url: str, people: People) -> bool:
    """An https URL on one of ``[notify.people] slack_hosts``, with no user part."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        return False
    return (
        parts.scheme == "https"
        and parts.netloc in people.slack_hosts
        and parts.username is None
        and not parts.fragment
    )


def _prefs(conn: Connection, notify: NotifyConfig) -> dict[str, Pref]:
    """Every enabled person's preference (none unless ``[notify.people]``). One with
    nowhere this checkpoint can send to is still a choice: nothing, not the default."""
    if not notify.routing.people.enabled:
        return {}
    rows = conn.execute(
        sa.select(notify_prefs)
        .select_from(notify_prefs.join(users, users.c.username == notify_prefs.c.username))
        .where(users.c.disabled.is_(False))
    ).all()
    return {p.username: p for p in (Pref.from_row(r) for r in rows)}


def targets(
    conn: Connection, notify: NotifyConfig, proposal_id: str, kind: str
) -> tuple[list[str], list[str]]:
    """``(the channels and person:<name> that get proposal_id's kind event, the groups
    it was routed to so far)``.

    Every broadcast channel that wants ``kind``; for a routed proposal, its rule's
    channels, and each member of every group asked so far (earlier groups keep their
    part): by their own preference when they set one, else by the group's channels (its
    default); for a proposal routed to no group, each person whose preference asks for it.
    """
    out = list(notify.channels_for(kind))
    people = notify.routing.people
    prefs = _prefs(conn, notify)
    route = routed(conn, proposal_id)
    asked: list[str] = []
    if route is not None:
        out += [c for c in json.loads(route.notify) if notify.wants(c, kind)]
        asked = list(json.loads(route.groups)[: route.level + 1])
    if not asked:  # routed to no group (at most to its rule's channels)
        out += [
            PERSON_PREFIX + name
            for name, p in sorted(prefs.items())
            if kind in p.events and p.reachable(people)
        ]
    for name in asked:
        group = notify.routing.groups.get(name)
        if group is None:
            continue  # the policy no longer has it: no one to tell
        for member in sorted(group.members):
            pref = prefs.get(member)
            if pref is None:
                out += [c for c in group.notify if notify.wants(c, kind)]
            elif kind in pref.events and pref.reachable(people):
                out.append(PERSON_PREFIX + member)
    return list(dict.fromkeys(out)), asked


class PersonSender:
    """Sends to one person where their preference says, read at each send."""

    def __init__(
        self,
        engine: Engine,
        config: NotifyConfig,
        username: str,
        email: EmailSender | None,
    ) -> None:
        self.name = PERSON_PREFIX + username
        self._engine = engine
        self._config = config
        self._username = username
        self._email = email

    def _pref(self) -> Pref | None:
        with self._engine.connect() as conn:
            row = conn.execute(
                sa.select(notify_prefs).where(notify_prefs.c.username == self._username)
            ).first()
        return None if row is None else Pref.from_row(row)

    def send(self, body: Mapping[str, Any]) -> None:
        pref = self._pref()
        people = self._config.routing.people
        if pref is None or not pref.reachable(people):
            return  # the person took their preference back: nothing to send, not a failure
        if pref.email and self._email is not None:
            self._email.to((pref.email,)).send(body)
        if pref.slack_url:
            if not slack_url_allowed(pref.slack_url, people):
                raise DeliveryError("the personal Slack URL names a host not allowed")
            channel = Channel(self.name, "slack", frozenset(), None, ca_file=people.ca_file)
            where = f"notify.people ({self.name})"
            slack = SlackSender(channel, pref.slack_url, self._config.timeout, where)
            try:
                slack.send(body)
            finally:
                slack.close()

    def send_all(self, bodies: Sequence[Mapping[str, Any]]) -> list[str | None]:
        return _each(self, bodies)


def person_senders(
    engine: Engine, config: NotifyConfig, senders: Mapping[str, Sender]
) -> Callable[[str], Sender | None]:
    """The sender of a ``person:<name>`` channel (None for any other name)."""
    via = config.routing.people.email_via
    email = senders.get(via) if via is not None else None

    def sender(channel: str) -> Sender | None:
        if not channel.startswith(PERSON_PREFIX) or not config.routing.people.enabled:
            return None
        mail = email if isinstance(email, EmailSender) else None
        return PersonSender(engine, config, channel.removeprefix(PERSON_PREFIX), mail)

    return sender
