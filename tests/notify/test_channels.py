"""The three channels against real receivers: a Standard Webhooks receiver, Slack's
incoming webhook (an HTTPS server checking the documented message shape), and an SMTP
server (aiosmtpd) that takes mail only after STARTTLS and a password. Over every event
kind, no notification carries an approval, a signature, a receipt, a token or a secret.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from standardwebhooks import Webhook

from services.checkpoint.errors import ConfigError
from services.checkpoint.models import approvals, outcomes
from services.checkpoint.notify import (
    Channel,
    Dispatcher,
    open_channels,
    sample_body,
    slack_message,
)
from services.checkpoint.notify.channels import DeliveryError, EmailSender
from services.checkpoint.notify.config import NotifyConfig
from tests.checkpoint.harness import World, make_world
from tests.support.tls import TestCA, make_ca

from .flows import every_event
from .smtp import PASSWORD, USER, Mailbox, smtp_server
from .support import Receiver, notify_policy, receiver, webhook_secret, write_secret

SLACK_PATH = "/services/T000/B000/XXXXSECRETXXXX"


@dataclass
class Stack:
    world: World
    hook: Receiver
    slack: Receiver
    mail: Mailbox
    secrets: list[str]


def _server_tls(ca: TestCA, label: str) -> ssl.SSLContext:
    cert = ca.issue(label)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert_file, cert.key_file)
    return context


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("channels")
    ca = make_ca(tmp / "ca")
    secret = webhook_secret()
    with (
        receiver() as hook,
        receiver(tls=_server_tls(ca, "slack")) as slack,
        smtp_server(_server_tls(ca, "smtp")) as mail,
    ):
        slack_url = slack.url.replace("/hook", SLACK_PATH)
        policy = notify_policy(
            f"""
[notify]
proposal_url = "https://airlock.example/proposals/{{proposal_id}}"
[notify.channels.hook]
type = "webhook"
url = "{hook.url}"
secret_file = "{write_secret(tmp, "hook", secret)}"
[notify.channels.team-slack]
type = "slack"
url_file = "{write_secret(tmp, "slack", slack_url)}"
ca_file = "{ca.ca_file}"
[notify.channels.mail]
type = "email"
host = "127.0.0.1"
port = {mail.port}
username = "{USER}"
password_file = "{write_secret(tmp, "smtp", PASSWORD)}"
from = "airlock@example.com"
to = ["ops@example.com"]
ca_file = "{ca.ca_file}"
"""
        )
        world = make_world(f"sqlite:///{tmp / 'cp.db'}", tmp, policy)
        every_event(world)
        dispatcher: Dispatcher = world.app.state.notify
        while dispatcher.run_once(wait=True):
            pass
        try:
            yield Stack(world, hook, slack, mail, [secret, secret[6:], slack_url, PASSWORD])
        finally:
            dispatcher.stop()
            world.checkpoint.db.dispose()


def _events(stack: Stack) -> int:
    with stack.world.checkpoint.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM notify_events")).scalar_one())


def test_slack_gets_its_documented_message_shape(stack: Stack) -> None:
    got = stack.slack.got()
    assert len(got) == _events(stack) > 0
    for request in got:
        assert request.path == SLACK_PATH
        assert request.headers["content-type"] == "application/json"
        message = json.loads(request.body)
        # api.slack.com/messaging/webhooks: text (the notification's fallback) and blocks.
        assert set(message) == {"text", "blocks"} and isinstance(message["text"], str)
        header, section, *rest = message["blocks"]
        assert header["type"] == "header"
        assert header["text"]["type"] == "plain_text" and len(header["text"]["text"]) <= 150
        assert section["type"] == "section" and 1 <= len(section["fields"]) <= 10
        for item in section["fields"]:
            assert item["type"] == "mrkdwn" and len(item["text"]) <= 2000
        (actions,) = rest
        (button,) = actions["elements"]
        assert actions["type"] == "actions" and button["type"] == "button"
        assert button["url"].startswith("https://airlock.example/proposals/prop_notify")
        assert len(button["text"]["text"]) <= 75
        fields = "\n".join(item["text"] for item in section["fields"])
        for name in ("*Summary*", "*Target*", "*Risk*", "*Votes*"):
            assert name in fields


def test_slack_escapes_what_the_agent_wrote() -> None:
    body = sample_body("msg_" + "0" * 32, "x", 1_764_400_000)
    body["data"]["summary"] = "<!channel> see <https://evil.example|this> & \u202eevil"
    text = json.dumps(slack_message(body))
    assert "<!channel>" not in text and "<https://evil" not in text
    assert "&lt;!channel&gt;" in text and "&amp;" in text and "\u202e" not in text


def test_email_arrives_over_starttls_signed_in(stack: Stack) -> None:
    messages = stack.mail.got()
    assert len(messages) == _events(stack)
    assert set(stack.mail.sessions) == {(True, USER)}, stack.mail.sessions[:2]
    subjects = {str(m["Subject"]).split(":")[0] for m in messages}
    assert "[Airlock] proposal.needs_vote" in subjects
    first = messages[0]
    assert first["From"] == "airlock@example.com" and first["To"] == "ops@example.com"
    assert "Review:   https://airlock.example/proposals/" in first.get_payload()


def test_every_webhook_verifies(stack: Stack) -> None:
    got = stack.hook.got()
    assert len(got) == _events(stack)
    verifier = Webhook(stack.secrets[0])
    for request in got:
        verifier.verify(request.body, request.headers)


def _forbidden(stack: Stack) -> list[str]:
    """Every value a notification must never carry, read from the checkpoint itself."""
    values = list(stack.secrets) + list(stack.world.tokens.values())
    with stack.world.checkpoint.engine.connect() as conn:
        for envelope, nonce, statement in conn.execute(
            sa.select(approvals.c.envelope, approvals.c.nonce, approvals.c.statement)
        ):
            dsse = json.loads(envelope)
            values += [nonce, dsse["payload"], base64.b64encode(statement).decode()]
            values += [s["sig"] for s in dsse["signatures"]]
        for (receipt,) in conn.execute(sa.select(outcomes.c.receipt)):
            dsse = json.loads(receipt)
            values += [dsse["payload"], *(s["sig"] for s in dsse["signatures"])]
    assert len(values) > 20
    return values


def test_no_notification_carries_a_bundle_signature_token_or_secret(stack: Stack) -> None:
    sent: list[str] = []
    for request in stack.hook.got():
        sent.append(request.body.decode())
        # Its own Standard Webhooks signature is the one signature a webhook carries.
        sent.append(
            json.dumps({k: v for k, v in request.headers.items() if k != "webhook-signature"})
        )
    sent += [r.body.decode() for r in stack.slack.got()]
    sent += [m.as_string() for m in stack.mail.got()]
    kinds = {json.loads(r.body)["type"] for r in stack.hook.got()}
    assert len(kinds) == 10  # every event kind was sent on every channel
    forbidden = _forbidden(stack)
    for text in sent:
        for value in forbidden:
            assert value not in text
        for key in ('"signatures"', '"payloadType"', '"envelope"', '"nonce"', '"receipt"'):
            assert key not in text


def test_a_server_without_starttls_is_never_sent_the_mail_in_clear(tmp_path: Path) -> None:
    with smtp_server(None) as plain:
        channel = Channel(
            "mail",
            "email",
            frozenset({"proposal.approved"}),
            None,
            host="127.0.0.1",
            port=plain.port,
            sender="airlock@example.com",
            to=("ops@example.com",),
        )
        sender = EmailSender(channel, None, 5.0, "notify.channels.mail")
        with pytest.raises(DeliveryError, match=r"(?i)starttls"):
            sender.send(sample_body("msg_" + "1" * 32, "mail", 1_764_400_000))
        assert plain.got() == []


def test_a_missing_secret_file_stops_the_start(tmp_path: Path) -> None:
    config = notify_policy(
        f"""
[notify.channels.hook]
type = "webhook"
url = "https://hooks.example/x"
secret_file = "{tmp_path / "absent"}"
"""
    ).notify
    with pytest.raises(ConfigError, match=r"notify\.channels\.hook: cannot read"):
        open_channels(config)
    assert open_channels(NotifyConfig()) == {}
