"""People's own notification preferences: set through ``/v1/me/notifications``, honoured
by delivery (only the events a person chose, to where they chose), and a member of a
routed group with no preference gets the group's default. Real receivers: the group's
webhook, and a personal Slack incoming webhook on an HTTPS server the test's CA signed.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from services.checkpoint.models import notify_deliveries, notify_events
from services.checkpoint.notify import Dispatcher
from tests.checkpoint.harness import World, make_world
from tests.support.tls import make_ca

from .smtp import PASSWORD, USER, smtp_server
from .support import (
    ROUTED_TAGS,
    SLA_S,
    Receiver,
    receiver,
    routed_policy,
    webhook_secret,
    write_secret,
)

ME = "/v1/me/notifications"


@dataclass
class People:
    world: World
    group: Receiver  # payments' default channel
    slack: Receiver  # a personal Slack webhook
    slack_url: str


@pytest.fixture
def people(tmp_path: Path) -> Iterator[People]:
    ca = make_ca(tmp_path / "ca")
    cert = ca.issue("slack")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert.cert_file, cert.key_file)
    with receiver() as group, receiver(tls=tls) as slack:
        host = slack.url.split("//")[1].split("/")[0]
        secret = write_secret(tmp_path, "group", webhook_secret())
        policy = routed_policy(
            f"""
[notify.people]
slack_hosts = ["{host}"]
ca_file = "{ca.ca_file}"
[notify.channels.payments-hook]
type = "webhook"
url = "{group.url}"
secret_file = "{secret}"
""",
            payments='notify = ["payments-hook"]',
        )
        world = make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, policy)
        try:
            yield People(world, group, slack, slack.url.replace("/hook", "/services/T1/B1/alice"))
        finally:
            dispatcher: Dispatcher = world.app.state.notify
            dispatcher.stop()
            world.client.close()
            world.checkpoint.db.dispose()


def _deliver(world: World) -> None:
    dispatcher: Dispatcher = world.app.state.notify
    while dispatcher.run_once(wait=True):
        pass


def _types(rx: Receiver) -> list[str]:
    return [json.loads(seen.body)["type"] for seen in rx.got()]


def _slack_types(rx: Receiver) -> list[str]:
    return [json.loads(seen.body)["text"].split(":")[1].strip() for seen in rx.got()]


def _set(world: World, who: str, **body: Any) -> Any:
    return world.client.put(ME, json=body, headers=world.auth(who))


def test_a_preference_is_stored_shown_masked_and_cleared(people: People) -> None:
    world = people.world
    first = world.client.get(ME, headers=world.auth("alice")).json()
    assert first["set"] is False and first["groups"] == ["payments"]
    assert first["delivered"] is True and first["email_delivered"] is False
    assert "proposal.escalated" in first["kinds"]
    saved = _set(
        world,
        "alice",
        events=["proposal.needs_vote", "proposal.expiring"],
        email="alice@example.com",
        slack_url=people.slack_url,
    )
    assert saved.status_code == 200, saved.text
    shown = world.client.get(ME, headers=world.auth("alice")).json()
    assert shown["set"] is True and shown["email"] == "alice@example.com"
    assert shown["events"] == ["proposal.needs_vote", "proposal.expiring"]
    assert shown["slack"].endswith("lice") and people.slack_url not in json.dumps(shown)
    # The page never holds the URL: sent without it, it is kept unless taken back.
    _set(world, "alice", events=["proposal.needs_vote"], keep_slack_url=True)
    assert world.client.get(ME, headers=world.auth("alice")).json()["slack"] == shown["slack"]
    _set(world, "alice", events=["proposal.needs_vote"])
    assert world.client.get(ME, headers=world.auth("alice")).json()["slack"] is None
    # Another person's preference is their own.
    assert world.client.get(ME, headers=world.auth("bob")).json()["set"] is False
    assert world.client.delete(ME, headers=world.auth("alice")).status_code == 204
    assert world.client.get(ME, headers=world.auth("alice")).json()["set"] is False


@pytest.mark.parametrize(
    ("body", "field", "refusal"),
    [
        ({"events": ["proposal.nope"]}, "events", "E_INVALID"),
        ({"events": [], "email": "not an address"}, "email", "E_INVALID"),
        ({"events": [], "email": "a@b.example\r\nBcc: x@y.example"}, "email", "E_INVALID"),
        (
            {"events": [], "slack_url": "http://hooks.slack.com/services/x"},
            "slack_url",
            "E_INVALID",
        ),
        ({"events": [], "slack_url": "https://evil.example/x"}, "slack_url", "E_FORBIDDEN"),
        ({"events": [], "slack_url": "https://u@127.0.0.1/x"}, "slack_url", "E_FORBIDDEN"),
    ],
)
def test_a_bad_preference_is_refused_and_nothing_is_stored(
    people: People, body: dict[str, Any], field: str, refusal: str
) -> None:
    world = people.world
    refused = _set(world, "alice", **body)
    assert refused.json()["error"]["code"] == refusal, refused.text
    assert refused.status_code == (422 if refusal == "E_INVALID" else 403)
    assert field in refused.json()["error"]["message"]
    assert world.client.get(ME, headers=world.auth("alice")).json()["set"] is False


def test_a_service_token_has_no_preference(people: People) -> None:
    refused = people.world.client.get(ME, headers=people.world.auth("agent"))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "E_FORBIDDEN"


def test_delivery_honours_each_persons_choice_and_the_group_default(people: People) -> None:
    world = people.world
    assert _set(
        world, "alice", events=["proposal.needs_vote"], slack_url=people.slack_url
    ).is_success
    routed = world.submit(
        proposal_id="prop_prefs0000001", resource_id="i-prefs0001", tags=ROUTED_TAGS
    )
    assert routed.status_code == 201, routed.text
    _deliver(world)
    # alice: on her own Slack; bob (no preference): through payments' default channel.
    assert _slack_types(people.slack) == ["proposal.needs_vote"]
    assert people.slack.got()[0].path == "/services/T1/B1/alice"
    assert _types(people.group) == ["proposal.needs_vote"]
    world.clock.advance(SLA_S)
    assert world.checkpoint.sweep()["escalated"] == 1
    _deliver(world)
    # alice did not choose escalations; bob's default channel takes them.
    assert _slack_types(people.slack) == ["proposal.needs_vote"]
    assert _types(people.group) == ["proposal.needs_vote", "proposal.escalated"]
    # A proposal routed to no group reaches alice by her choice, and no group channel.
    assert (
        world.submit(proposal_id="prop_prefs0000002", resource_id="i-prefs0002").status_code == 201
    )
    _deliver(world)
    assert _slack_types(people.slack) == ["proposal.needs_vote"] * 2
    assert len(_types(people.group)) == 2
    # The outbox never holds the personal URL: it is read when sending.
    with world.checkpoint.engine.connect() as conn:
        held = [str(b) for b in conn.execute(sa.select(notify_events.c.body)).scalars()]
        held += [str(c) for c in conn.execute(sa.select(notify_deliveries.c.channel)).scalars()]
    assert "person:alice" in held
    assert not any(people.slack_url in text or "/services/T1" in text for text in held)


def test_a_person_who_chose_nothing_hears_nothing_not_even_the_default(people: People) -> None:
    world = people.world
    assert _set(world, "alice", events=[]).is_success
    assert _set(world, "bob", events=["proposal.needs_vote"]).is_success  # nowhere to send
    assert world.submit(proposal_id="prop_prefs0000003", tags=ROUTED_TAGS).status_code == 201
    _deliver(world)
    assert people.slack.got() == [] and people.group.got() == []


def test_a_preference_taken_back_before_sending_sends_nothing(people: People) -> None:
    world = people.world
    assert _set(
        world, "alice", events=["proposal.needs_vote"], slack_url=people.slack_url
    ).is_success
    assert world.submit(proposal_id="prop_prefs0000004").status_code == 201
    assert world.client.delete(ME, headers=world.auth("alice")).status_code == 204
    _deliver(world)
    assert people.slack.got() == []
    with world.checkpoint.engine.connect() as conn:
        states = conn.execute(
            sa.select(notify_deliveries.c.state).where(
                notify_deliveries.c.channel == "person:alice"
            )
        ).scalars()
        assert list(states) == ["delivered"]


def test_a_persons_email_goes_through_the_email_via_channel_to_them_only(
    tmp_path: Path,
) -> None:
    ca = make_ca(tmp_path / "ca")
    cert = ca.issue("smtp")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert.cert_file, cert.key_file)
    with smtp_server(tls) as mail:
        policy = routed_policy(
            f"""
[notify.people]
email_via = "mail"
[notify.channels.mail]
type = "email"
host = "127.0.0.1"
port = {mail.port}
username = "{USER}"
password_file = "{write_secret(tmp_path, "smtp", PASSWORD)}"
from = "airlock@example.com"
to = ["ops@example.com"]
ca_file = "{ca.ca_file}"
"""
        )
        world = make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, policy)
        try:
            shown = world.client.get(ME, headers=world.auth("alice")).json()
            assert shown["email_delivered"] is True
            assert _set(
                world, "alice", events=["proposal.needs_vote"], email="alice@example.com"
            ).is_success
            assert world.submit(proposal_id="prop_prefs0000005").status_code == 201
            _deliver(world)
            # Only alice's own mail: the channel people's mail goes through broadcasts nothing.
            (message,) = mail.got()
            assert message["To"] == "alice@example.com"
            assert str(message["Subject"]).startswith("[Airlock] proposal.needs_vote")
            assert mail.sessions == [(True, USER)]
        finally:
            dispatcher: Dispatcher = world.app.state.notify
            dispatcher.stop()
            world.client.close()
            world.checkpoint.db.dispose()
