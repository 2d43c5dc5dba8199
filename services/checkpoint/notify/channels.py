"""Sending one notification: signed webhooks, Slack incoming webhooks, SMTP with STARTTLS.

:func:`open_channels` reads each channel's secret file once, at start, and refuses (with
:class:`ConfigError`) one that is missing, empty or malformed. A sender's ``send`` makes
one try within the channel's timeout, all of it, and raises :class:`DeliveryError` with
a one-line reason on any failure; retrying is the worker's (:mod:`.worker`). Nothing here
logs or repeats a secret: a Slack URL or an SMTP password never appears in an error.
"""

from __future__ import annotations

import json
import smtplib
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Final, Protocol

import httpx
from standardwebhooks import Webhook

from airlock.httpdeadline import deadline_transport, within
from airlock.text import inert
from airlock.tls import CAFileError, ca_file_context
from services.checkpoint.errors import ConfigError

from .config import Channel, NotifyConfig

__all__ = [
    "DeliveryError",
    "EmailSender",
    "Sender",
    "SlackSender",
    "WebhookSender",
    "email_message",
    "open_channels",
    "slack_message",
]

_USER_AGENT: Final = "airlock-checkpoint-notify"
#: Slack's documented limits (api.slack.com/reference/block-kit/blocks).
_SLACK_HEADER_MAX: Final = 150
_SLACK_FIELD_MAX: Final = 2000


class DeliveryError(Exception):
    """One try failed; the message is one line, safe to keep and show."""


class Sender(Protocol):
    """One channel, ready to send (its secret read)."""

    name: str

    def send(self, body: Mapping[str, Any]) -> None:
        """Send ``body`` (an event as :func:`.events.build_body` made it) once, or raise
        :class:`DeliveryError`."""
        ...

    def send_all(self, bodies: Sequence[Mapping[str, Any]]) -> list[str | None]:
        """Send each of ``bodies`` once: for each, None (taken) or the reason it was not."""
        ...


def _each(sender: Sender, bodies: Sequence[Mapping[str, Any]]) -> list[str | None]:
    """Send one by one until one fails: the rest of the batch is not tried (a receiver
    that hangs costs one timeout a batch) and counts as failed with that reason."""
    results: list[str | None] = []
    for body in bodies:
        try:
            sender.send(body)
        except DeliveryError as exc:
            return results + [str(exc)] * (len(bodies) - len(results))
        results.append(None)
    return results


def _read_secret(path: Path, where: str) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: {path} is not UTF-8 text") from None
    if not text:
        raise ConfigError(f"{where}: {path} is empty")
    return text


def _verify(channel: Channel, where: str) -> ssl.SSLContext:
    """The context verifying the receiver: the channel's CA file, or the system's CAs."""
    if channel.ca_file is None:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context
    try:
        return ca_file_context(channel.ca_file)
    except CAFileError as exc:
        raise ConfigError(f"{where}.ca_file: {exc}") from None


def _post(
    client: httpx.Client, url: str, content: bytes, headers: dict[str, str], timeout: float
) -> None:
    try:
        with within(timeout):
            response = client.post(url, content=content, headers=headers)
    except httpx.HTTPError as exc:
        raise DeliveryError(f"{type(exc).__name__}: no answer") from None
    if not 200 <= response.status_code < 300:
        raise DeliveryError(f"HTTP {response.status_code}")


class WebhookSender:
    """A POST of the event's JSON, signed per the Standard Webhooks spec (``webhook-id``,
    ``webhook-timestamp``, ``webhook-signature: v1,<HMAC-SHA256>``)."""

    def __init__(self, channel: Channel, secret: str, timeout: float, where: str) -> None:
        assert channel.url is not None  # config.py requires it of a webhook
        try:
            self._webhook = Webhook(secret)
        except Exception:  # binascii.Error, EmptyWebhookSecretError: the text is the secret's
            raise ConfigError(f"{where}.secret_file: not a whsec_<base64> secret") from None
        self.name = channel.name
        self._url = channel.url
        self._timeout = timeout
        self._client = httpx.Client(
            transport=deadline_transport(_verify(channel, where)),
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
        )

    def send(self, body: Mapping[str, Any]) -> None:
        content = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        at = datetime.now(UTC)  # the spec's timestamp is the attempt's, on the wall clock
        event_id = str(body["id"])
        headers = {
            "content-type": "application/json",
            "user-agent": _USER_AGENT,
            "webhook-id": event_id,
            "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": self._webhook.sign(event_id, at, content),
        }
        _post(self._client, self._url, content, headers, self._timeout)

    def send_all(self, bodies: Sequence[Mapping[str, Any]]) -> list[str | None]:
        return _each(self, bodies)  # one kept-alive connection serves them all


def _slack_escape(text: str, limit: int) -> str:
    # Slack's three control characters (api.slack.com/reference/surfaces/formatting#escaping):
    # agent-written text must not become a link or an @channel.
    shown = inert(text, limit=limit)
    return shown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message (``text`` and Block Kit ``blocks``) for ``body``."""
    data = body["data"]
    title = f"Airlock: {body['type']}"
    votes = data["votes"]
    lines = [
        ("Summary", data["summary"] or "-"),
        ("Target", data["target"] or "-"),
        ("Risk", data["risk"] or "-"),
        (
            "Votes",
            f"{votes['count']} of {votes['quorum']}"
            + (f" ({', '.join(votes['by'])})" if votes["by"] else ""),
        ),
        ("Proposal", data["proposal_id"] or "-"),
    ]
    if data.get("groups"):  # a body from before routing has none
        lines.append(("Asked", " then ".join(data["groups"])))
    fields = [
        {"type": "mrkdwn", "text": f"*{name}*\n{_slack_escape(str(value), 1000)}"}
        for name, value in lines
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:_SLACK_HEADER_MAX]}},
        {"type": "section", "fields": fields},
    ]
    if data.get("url"):
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Review in Airlock"},
                        "url": data["url"],
                    }
                ],
            }
        )
    fallback = f"{title}: {_slack_escape(str(data['target'] or data['summary']), 300)}"
    return {"text": fallback[:_SLACK_FIELD_MAX], "blocks": blocks}


class SlackSender:
    """A POST to a Slack incoming webhook (its URL read from ``url_file``)."""

    def __init__(self, channel: Channel, url: str, timeout: float, where: str) -> None:
        if not url.startswith("https://"):
            raise ConfigError(f"{where}.url_file: the file must hold an https:// URL")
        self.name = channel.name
        self._url = url
        self._timeout = timeout
        self._client = httpx.Client(
            transport=deadline_transport(_verify(channel, where)),
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
        )

    def close(self) -> None:
        self._client.close()

    def send(self, body: Mapping[str, Any]) -> None:
        content = json.dumps(slack_message(body)).encode()
        headers = {"content-type": "application/json", "user-agent": _USER_AGENT}
        _post(self._client, self._url, content, headers, self._timeout)

    def send_all(self, bodies: Sequence[Mapping[str, Any]]) -> list[str | None]:
        return _each(self, bodies)


def email_message(body: Mapping[str, Any], sender: str, to: tuple[str, ...]) -> EmailMessage:
    """The plain-text email for ``body``."""
    data = body["data"]
    votes = data["votes"]
    subject = (
        f"[Airlock] {body['type']}: {inert(str(data['target'] or data['summary']), limit=120)}"
    )
    message = EmailMessage()
    message["Subject"] = " ".join(subject.split())  # one line, whatever the agent wrote
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["Message-ID"] = f"<{body['id']}@airlock>"
    lines = [
        f"Event:    {body['type']} ({body['id']})",
        f"Proposal: {data['proposal_id']}",
        f"Summary:  {inert(str(data['summary'] or '-'), limit=500)}",
        f"Target:   {inert(str(data['target'] or '-'), limit=300)}",
        f"Risk:     {data['risk'] or '-'}",
        f"Votes:    {votes['count']} of {votes['quorum']}",
        f"Review:   {data['url'] or '(open the Airlock web app)'}",
    ]
    if data.get("groups"):
        lines.insert(-1, f"Asked:    {' then '.join(data['groups'])}")
    message.set_content("\n".join(lines) + "\n")
    return message


class EmailSender:
    """SMTP with STARTTLS (required: a server that does not offer it gets nothing)."""

    def __init__(self, channel: Channel, password: str | None, timeout: float, where: str) -> None:
        assert channel.host is not None and channel.sender is not None  # config.py checks
        self.name = channel.name
        self._channel = channel
        self._password = password
        self._timeout = timeout
        self._context = _verify(channel, where)
        # Said explicitly (both are the defaults): the server's name and chain are checked.
        self._context.check_hostname = True
        self._context.verify_mode = ssl.CERT_REQUIRED

    def to(self, addresses: tuple[str, ...]) -> EmailSender:
        """The same server, sign-in and sender, to other recipients (a person's own)."""
        other = EmailSender.__new__(EmailSender)
        other.name = self.name
        other._channel = replace(self._channel, to=addresses)
        other._password = self._password
        other._timeout = self._timeout
        other._context = self._context
        return other

    def send(self, body: Mapping[str, Any]) -> None:
        (error,) = self.send_all([body])
        if error is not None:
            raise DeliveryError(error)

    def send_all(self, bodies: Sequence[Mapping[str, Any]]) -> list[str | None]:
        """One SMTP session (one TLS handshake) for all of ``bodies``."""
        ch = self._channel
        assert ch.host is not None and ch.sender is not None
        results: list[str | None] = []
        try:
            with smtplib.SMTP(ch.host, ch.port, timeout=self._timeout) as smtp:
                smtp.ehlo()
                smtp.starttls(context=self._context)  # raises if not offered: never in clear
                smtp.ehlo()
                if ch.username is not None and self._password is not None:
                    smtp.login(ch.username, self._password)
                for body in bodies:
                    smtp.send_message(email_message(body, ch.sender, ch.to))
                    results.append(None)
        except (OSError, smtplib.SMTPException) as exc:
            # smtplib's texts quote the server, never our password.
            error = f"{type(exc).__name__}: {inert(str(exc), limit=200)}"
            results += [error] * (len(bodies) - len(results))
        return results


def open_channels(config: NotifyConfig) -> dict[str, Sender]:
    """Every configured channel, its secret read; :class:`ConfigError` if one cannot be."""
    senders: dict[str, Sender] = {}
    for channel in config.channels:
        where = f"notify.channels.{channel.name}"
        secret = None if channel.secret_file is None else _read_secret(channel.secret_file, where)
        if channel.type == "webhook":
            assert secret is not None
            senders[channel.name] = WebhookSender(channel, secret, config.timeout, where)
        elif channel.type == "slack":
            assert secret is not None
            senders[channel.name] = SlackSender(channel, secret, config.timeout, where)
        else:
            senders[channel.name] = EmailSender(channel, secret, config.timeout, where)
    return senders
