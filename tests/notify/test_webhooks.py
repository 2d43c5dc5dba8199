"""Signed webhooks from the outbox: every signature verifies with the ``standardwebhooks``
package, a failing receiver gets the same event id again after a backoff, a dead delivery
is shown and re-sent, and what is written to the outbox is written with its state change.

The checkpoint runs in this process on SQLite with a clock the test moves; the worker's
passes are driven by hand (``run_once``), so nothing sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from services.checkpoint.models import NOTIFY_KINDS
from services.checkpoint.notify import Dispatcher, Outbox
from tests.checkpoint.harness import TestClient, World, approved, make_world

from .flows import delivery_states, every_event, kinds, report
from .support import Receiver, notify_policy, receiver, webhook_secret, write_secret


def _world(tmp_path: Path, url: str, secret: str, extra: str = "") -> World:
    secret_file = write_secret(tmp_path, "hook.secret", secret)
    policy = notify_policy(
        f"""
[notify]
proposal_url = "https://airlock.example/proposals/{{proposal_id}}"
retry_delays = [10]
{extra}
[notify.channels.ops]
type = "webhook"
url = "{url}"
secret_file = "{secret_file}"
"""
    )
    return make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, policy)


def _dispatcher(world: World) -> Dispatcher:
    dispatcher: Dispatcher = world.app.state.notify
    return dispatcher


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[tuple[World, Receiver, str]]:
    secret = webhook_secret()
    with receiver() as rx:
        world = _world(tmp_path, rx.url, secret)
        try:
            yield world, rx, secret
        finally:
            _dispatcher(world).stop()
            world.client.close()
            world.checkpoint.db.dispose()


def test_every_event_arrives_signed_and_verifies_with_standardwebhooks(
    hook: tuple[World, Receiver, str],
) -> None:
    world, rx, secret = hook
    every_event(world)
    while _dispatcher(world).run_once(wait=True):
        pass
    got = rx.got()
    assert set(kinds(world)) == set(NOTIFY_KINDS)
    assert kinds(world).count("proposal.expiring") == 1  # three sweeps, one warning
    assert len(got) == len(kinds(world))
    verifier = Webhook(secret)
    seen_types = set()
    for request in got:
        body = verifier.verify(request.body, request.headers)  # raises on a bad signature
        assert body["id"] == request.headers["webhook-id"]
        seen_types.add(body["type"])
    assert seen_types == set(kinds(world))
    assert len({r.headers["webhook-id"] for r in got}) == len(got)
    assert delivery_states(world) == {"delivered": len(got)}


def test_a_forged_signature_fails_verification(hook: tuple[World, Receiver, str]) -> None:
    """The receiver side of the check above can fail: another secret does not verify."""
    world, rx, _ = hook
    approved(world)
    _dispatcher(world).run_once(wait=True)
    request = rx.got()[0]
    with pytest.raises(Exception, match="signature"):
        Webhook(webhook_secret()).verify(request.body, request.headers)


def test_a_receiver_failing_five_times_gets_the_event_again_with_the_same_id(
    tmp_path: Path,
) -> None:
    secret = webhook_secret()
    with receiver([500, 500, 500, 500, 500, 200]) as rx:
        world = _world(tmp_path, rx.url, secret)
        dispatcher = _dispatcher(world)
        world.submit()
        assert dispatcher.run_once(wait=True) == 1
        for _ in range(4):
            assert dispatcher.run_once(wait=True) == 0  # backing off: not due yet
            world.clock.advance(10)
            assert dispatcher.run_once(wait=True) == 1
        assert delivery_states(world) == {"pending": 1}
        world.clock.advance(10)
        assert dispatcher.run_once(wait=True) == 1
        world.clock.advance(3600)
        assert dispatcher.run_once(wait=True) == 0  # delivered: never again
        ids = [r.headers["webhook-id"] for r in rx.got()]
        assert len(ids) == 6 and len(set(ids)) == 1
        for request in rx.got():
            Webhook(secret).verify(request.body, request.headers)
        assert delivery_states(world) == {"delivered": 1}
        metrics = world.client.get("/metrics").text
        assert (
            'airlock_checkpoint_notify_deliveries_total{channel="ops",result="failed"} 5.0'
            in metrics
        )
        assert (
            'airlock_checkpoint_notify_deliveries_total{channel="ops",result="delivered"} 1.0'
            in metrics
        )
        assert "airlock_checkpoint_notify_outbox_pending 0.0" in metrics
        dispatcher.stop()
        world.checkpoint.db.dispose()


def test_past_its_retry_window_a_delivery_is_dead_shown_and_resent(tmp_path: Path) -> None:
    secret = webhook_secret()
    with receiver([500, 500, 500]) as rx:
        world = _world(tmp_path, rx.url, secret, "retry_for = 25")
        dispatcher = _dispatcher(world)
        outbox = Outbox(world.checkpoint.engine, world.clock)
        world.submit()
        for _ in range(3):
            dispatcher.run_once(wait=True)
            world.clock.advance(10)
        # Three tries over 20 s; the next would start after 30 s of a 25 s window.
        assert delivery_states(world) == {"dead": 1}
        (dead,) = outbox.listing(["dead"])
        assert dead.attempts == 3 and dead.last_error == "HTTP 500"
        assert "airlock_checkpoint_notify_outbox_dead 1.0" in world.client.get("/metrics").text
        assert dispatcher.run_once(wait=True) == 0  # dead stays dead
        assert outbox.resend(dead.id) and not outbox.resend(dead.id)
        assert dispatcher.run_once(wait=True) == 1
        assert delivery_states(world) == {"delivered": 1}
        ids = {r.headers["webhook-id"] for r in rx.got()}
        assert ids == {dead.event_id}  # the same event, re-sent
        dispatcher.stop()
        world.checkpoint.db.dispose()


def test_an_event_is_written_with_its_state_change_and_a_refused_one_writes_none(
    hook: tuple[World, Receiver, str],
) -> None:
    world, _, _ = hook
    proposal = world.submit().json()
    assert kinds(world) == ["proposal.needs_vote"]
    own = world.client.post(  # refused: bob may vote, but with a stale hash
        f"/v1/proposals/{proposal['id']}/approve",
        json={"action_hash": "sha256:" + "0" * 64},
        headers=world.auth("bob"),
    )
    assert own.status_code == 409
    assert kinds(world) == ["proposal.needs_vote"]
    record = world.approve("bob", proposal["id"], proposal["action_hash"]).json()
    assert record["state"] == "approved"
    assert kinds(world) == ["proposal.approved", "proposal.needs_vote"]
    # The same outcome reported twice (an executor's retry) is one event.
    approval_id = record["approval"]["approval_id"]
    report(world, proposal, approval_id, "succeeded")
    report(world, proposal, approval_id, "succeeded")
    assert kinds(world).count("proposal.executed") == 1


def test_the_event_body_names_the_proposal_and_links_its_page(
    hook: tuple[World, Receiver, str],
) -> None:
    world, rx, _ = hook
    proposal, _ = approved(world)
    _dispatcher(world).run_once(wait=True)
    _dispatcher(world).run_once(wait=True)
    bodies = {b["type"]: b for b in (json.loads(r.body) for r in rx.got())}
    data = bodies["proposal.approved"]["data"]
    assert data["proposal_id"] == proposal["id"]
    assert data["url"] == f"https://airlock.example/proposals/{proposal['id']}"
    assert data["votes"] == {"count": 1, "quorum": 1, "by": ["alice"]}
    assert data["risk"] == "medium" and "i-t4n0example" in data["target"]
    assert data["summary"].startswith("Idle 14 days")


@pytest.mark.postgres
def test_on_postgresql_events_land_once_and_are_delivered(pg_url: str, tmp_path: Path) -> None:
    secret = webhook_secret()
    with receiver() as rx:
        secret_file = write_secret(tmp_path, "hook.secret", secret)
        policy = notify_policy(
            f'[notify.channels.ops]\ntype = "webhook"\nurl = "{rx.url}"\n'
            f'secret_file = "{secret_file}"\n'
        )
        world = make_world(pg_url, tmp_path, policy)
        try:
            proposal, approval_id = approved(world)
            report(world, proposal, approval_id, "succeeded")
            report(world, proposal, approval_id, "succeeded")  # a retry: no second event
            assert kinds(world) == ["proposal.approved", "proposal.executed", "proposal.needs_vote"]
            while _dispatcher(world).run_once(wait=True):
                pass
            assert delivery_states(world) == {"delivered": 3}
            for request in rx.got():
                Webhook(secret).verify(request.body, request.headers)
        finally:
            _dispatcher(world).stop()
            world.client.close()
            world.checkpoint.db.dispose()


def test_an_event_wakes_the_worker_when_its_connection_goes_back_to_the_pool(
    hook: tuple[World, Receiver, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    world, _, _ = hook
    dispatcher = _dispatcher(world)
    woken: list[bool] = []
    monkeypatch.setattr(dispatcher, "wake", lambda: woken.append(True))
    with TestClient(world.app):  # runs the lifespan: the worker and what wakes it
        engine = world.checkpoint.engine
        # A pool event, never a connection event: that would make every statement of
        # every request dispatch events (the approve path's latency, bench_notify).
        assert not engine.dispatch.commit and not engine.dispatch.rollback
        assert world.client.get("/v1/proposals", headers=world.auth("alice")).status_code == 200
        assert woken == []  # a request that wrote no event wakes nothing
        approved(world)
        assert woken  # submit and approve each wrote an event
