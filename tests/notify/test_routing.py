"""Routing, SLAs and escalation: a routed proposal is told to its group, escalated to the
next one when its SLA passes on the test's clock (audited, told, once, after a restart
too), and approved only by members of the groups asked so far, at vote and at signing.

Each group's default is a webhook channel of its own (a real receiver), so who was told
is what each receiver got.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from services.checkpoint._db import Database
from services.checkpoint.errors import ConfigError
from services.checkpoint.keys import KeyDirectory, KeyRing
from services.checkpoint.models import approvals, proposal_routes, votes
from services.checkpoint.notify import Dispatcher
from services.checkpoint.notify.routed import route as routed_route
from services.checkpoint.policy import Policy
from services.checkpoint.routing import escalate
from services.checkpoint.service import Checkpoint
from tests.checkpoint.harness import World, audit_events, make_world
from tests.checkpoint.tools import code, submit_tool

from .support import (
    ROUTED_TAGS,
    SLA_S,
    Receiver,
    receiver,
    routed_policy,
    webhook_secret,
    write_secret,
)

PID = "prop_routed000001"


@dataclass
class Routed:
    world: World
    payments: Receiver
    leads: Receiver
    everyone: Receiver


def _channels(tmp: Path, **urls: str) -> str:
    out = ""
    for name, url in urls.items():
        secret = write_secret(tmp, name, webhook_secret())
        out += f'[notify.channels.{name}]\ntype = "webhook"\nurl = "{url}"\n'
        out += f'secret_file = "{secret}"\n'
    return out


def _policy(tmp: Path, rx: dict[str, Receiver], **kw: str | int) -> Policy:
    return routed_policy(
        "[notify]\n" + _channels(tmp, **{k: r.url for k, r in rx.items()}),
        payments='notify = ["payments-hook"]',
        leads='notify = ["leads-hook"]',
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def routed(tmp_path: Path) -> Iterator[Routed]:
    with receiver() as payments, receiver() as leads, receiver() as everyone:
        rx = {"payments-hook": payments, "leads-hook": leads, "everyone": everyone}
        world = make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, _policy(tmp_path, rx))
        try:
            yield Routed(world, payments, leads, everyone)
        finally:
            _dispatcher(world).stop()
            world.client.close()
            world.checkpoint.db.dispose()


def _dispatcher(world: World) -> Dispatcher:
    dispatcher: Dispatcher = world.app.state.notify
    return dispatcher


def _deliver(world: World) -> None:
    while _dispatcher(world).run_once(wait=True):
        pass


def _types(rx: Receiver) -> list[str]:
    return [json.loads(seen.body)["type"] for seen in rx.got()]


def _submit(world: World, proposal_id: str = PID) -> dict[str, object]:
    response = world.submit(proposal_id=proposal_id, resource_id="i-routed1", tags=ROUTED_TAGS)
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def _level(world: World, proposal_id: str = PID) -> int:
    with world.checkpoint.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(proposal_routes.c.level).where(
                    proposal_routes.c.proposal_id == proposal_id
                )
            ).scalar_one()
        )


def test_a_routed_proposal_is_told_to_its_group_and_broadcast_channels_only(
    routed: Routed,
) -> None:
    _submit(routed.world)
    _deliver(routed.world)
    assert _types(routed.payments) == ["proposal.needs_vote"]
    assert _types(routed.everyone) == ["proposal.needs_vote"]  # named by no rule or group
    assert _types(routed.leads) == []  # not asked yet
    # An unrouted proposal never reaches a group's channel.
    assert routed.world.submit(proposal_id="prop_plain00000001").status_code == 201
    _deliver(routed.world)
    assert _types(routed.payments) == ["proposal.needs_vote"]
    assert len(_types(routed.everyone)) == 2


def test_an_sla_that_passes_escalates_to_the_next_group_told_and_audited(
    routed: Routed,
) -> None:
    world = routed.world
    _submit(world)
    world.clock.advance(SLA_S - 1)
    assert world.checkpoint.sweep()["escalated"] == 0
    assert audit_events(world, "checkpoint.proposal.escalated") == []
    world.clock.advance(1)
    assert world.checkpoint.sweep()["escalated"] == 1
    (event,) = audit_events(world, "checkpoint.proposal.escalated")
    assert event["proposal_id"] == PID and event["rule"] == "payments-routed"
    assert (event["from_group"], event["to_group"], event["level"]) == ("payments", "leads", 1)
    assert event["sla"] == SLA_S
    _deliver(world)
    assert _types(routed.leads) == ["proposal.escalated"]
    told = json.loads(routed.leads.got()[0].body)["data"]
    assert told["proposal_id"] == PID and told["groups"] == ["payments", "leads"]
    # The group asked first keeps its part, and hears of the escalation.
    assert _types(routed.payments) == ["proposal.needs_vote", "proposal.escalated"]
    # A second sweep, later still, escalates nothing again (no group left).
    world.clock.advance(SLA_S * 3)
    assert world.checkpoint.sweep()["escalated"] == 0
    assert len(audit_events(world, "checkpoint.proposal.escalated")) == 1
    _deliver(world)
    assert _types(routed.leads) == ["proposal.escalated"]
    assert _level(world) == 1


def test_escalation_state_survives_a_restart_and_is_never_done_twice(
    routed: Routed, tmp_path: Path
) -> None:
    world = routed.world
    _submit(world)
    world.clock.advance(SLA_S)
    # Another checkpoint process on the same database (a restart, or a second replica).
    restarted = Checkpoint(
        Database(world.url),
        world.checkpoint.policy,
        KeyRing(KeyDirectory(world.keys_dir)),
        world.checkpoint.config,
        now=world.clock,
    )
    try:
        assert restarted.sweep()["escalated"] == 1
        assert world.checkpoint.sweep()["escalated"] == 0
        assert restarted.sweep()["escalated"] == 0
    finally:
        restarted.db.dispose()
    assert len(audit_events(world, "checkpoint.proposal.escalated")) == 1
    assert _level(world) == 1


def _votes(world: World) -> list[str]:
    with world.checkpoint.engine.connect() as conn:
        return [str(v) for v in conn.execute(sa.select(votes.c.voter)).scalars()]


def test_a_person_outside_the_routed_group_is_refused_at_vote(routed: Routed) -> None:
    world = routed.world
    proposal = _submit(world)
    refused = world.approve("carol", PID, str(proposal["action_hash"]))
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "E_FORBIDDEN"
    assert "payments" in refused.json()["error"]["message"]
    assert _votes(world) == []
    assert audit_events(world, "checkpoint.vote.approve") == []
    (audited,) = audit_events(world, "checkpoint.refused")
    assert (audited["by"], audited["code"], audited["proposal_id"]) == (
        "carol",
        "E_FORBIDDEN",
        PID,
    )
    # An admin is no member either.
    assert world.approve("admin", PID, str(proposal["action_hash"])).status_code == 403
    # Once escalated to her group, carol may approve.
    world.clock.advance(SLA_S)
    world.checkpoint.sweep()
    approved = world.approve("carol", PID, str(proposal["action_hash"]))
    assert approved.status_code == 200 and approved.json()["state"] == "approved"


def test_a_vote_of_someone_outside_the_group_is_refused_at_signing(
    routed: Routed, tmp_path: Path
) -> None:
    world = routed.world
    rx = {"payments-hook": routed.payments, "leads-hook": routed.leads}
    world.checkpoint.policy = _policy(tmp_path, {**rx, "everyone": routed.everyone}, quorum=2)
    proposal = _submit(world)
    assert world.approve("alice", PID, str(proposal["action_hash"])).status_code == 200
    # The policy is reloaded: alice is taken out of payments after her vote.
    world.checkpoint.policy = _policy(
        tmp_path, {**rx, "everyone": routed.everyone}, quorum=2, members='"bob"'
    )
    refused = world.approve("bob", PID, str(proposal["action_hash"]))
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "E_FORBIDDEN"
    assert "not signed: approver alice" in refused.json()["error"]["message"]
    with world.checkpoint.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(approvals)).scalar() == 0
    assert _votes(world) == ["alice"]  # bob's vote went with the refused transaction
    assert audit_events(world, "checkpoint.approval.issued") == []
    refusals = audit_events(world, "checkpoint.refused")
    assert [(r["by"], r["code"]) for r in refusals] == [("bob", "E_FORBIDDEN")]
    assert world.client.get(f"/v1/proposals/{PID}", headers=world.auth("bob")).json()["state"] == (
        "pending"
    )


@pytest.mark.parametrize(
    ("extra", "refusal"),
    [
        ('route = ["nobody"]', r"route names no group nobody"),
        ('sla = "1h"\nroute = ["payments"]', r"sla needs a next group"),
        ('route = ["leads"]\nsla = "30s"', r"sla is at least 60 seconds"),
        ('route = ["leads"]\nsla = "soon"', r"sla: a duration"),
        ('notify = ["absent"]', r"no channel absent in \[notify.channels\]"),
    ],
)
def test_a_route_that_could_not_work_is_refused_at_load(extra: str, refusal: str) -> None:
    text = f"""version = 1
[groups.payments]
members = ["alice"]
[groups.leads]
members = ["carol"]
[[rule]]
name = "r"
effect = "approve"
{extra}
"""
    with pytest.raises(ConfigError, match=refusal):
        Policy.from_bytes(text.encode(), "test")


def test_a_route_on_a_deny_rule_and_a_bad_group_are_refused_at_load() -> None:
    with pytest.raises(ConfigError, match=r"apply only to effect = approve"):
        Policy.from_bytes(
            b'version = 1\n[groups.g]\nmembers = ["a"]\n'
            b'[[rule]]\nname = "r"\neffect = "deny"\nroute = ["g"]\n',
            "test",
        )
    with pytest.raises(ConfigError, match=r"groups\.g\.members: 1 to"):
        Policy.from_bytes(b"version = 1\n[groups.g]\nmembers = []\n", "test")
    with pytest.raises(ConfigError, match=r"groups\.g: a table of members and notify"):
        Policy.from_bytes(b'version = 1\n[groups.g]\nmembers = ["a"]\nother = 1\n', "test")


REFUNDS = b"""version = 1
[groups.payments]
members = ["alice"]
[[rule]]
name = "refunds-routed"
effect = "approve"
match.tool = "refund"
route = ["payments"]
"""


def test_an_edit_by_someone_outside_the_routed_group_is_refused(tmp_path: Path) -> None:
    world = make_world(
        f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, Policy.from_bytes(REFUNDS, "test")
    )
    try:
        old = submit_tool(world).json()
        body = {"action_hash": old["action_hash"], "set": {"amount": 1500}, "note": ""}
        url = f"/v1/proposals/{old['id']}/edit"
        refused = world.client.post(url, json=body, headers=world.auth("bob"))
        assert refused.status_code == 403 and code(refused) == "E_FORBIDDEN", refused.text
        assert audit_events(world, "checkpoint.proposal.edited") == []
        state = world.client.get(f"/v1/proposals/{old['id']}", headers=world.auth("bob"))
        assert state.json()["state"] == "pending"
        made = world.client.post(url, json=body, headers=world.auth("alice"))
        assert made.status_code == 200 and made.json()["state"] == "approved", made.text
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


def test_on_postgresql_two_sweepers_at_once_escalate_once(pg_url: str, tmp_path: Path) -> None:
    with receiver() as payments, receiver() as leads, receiver() as everyone:
        rx = {"payments-hook": payments, "leads-hook": leads, "everyone": everyone}
        world = make_world(pg_url, tmp_path, _policy(tmp_path, rx))
        other = Checkpoint(
            Database(pg_url),
            world.checkpoint.policy,
            KeyRing(KeyDirectory(world.keys_dir)),
            world.checkpoint.config,
            now=world.clock,
        )
        try:
            _submit(world)
            world.clock.advance(SLA_S)
            start = threading.Barrier(2)
            counts: list[int] = []

            def sweep(cp: Checkpoint) -> None:
                start.wait(10)
                counts.append(cp.sweep()["escalated"])

            threads = [
                threading.Thread(target=sweep, args=(cp,)) for cp in (world.checkpoint, other)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert sorted(counts) == [0, 1]
            assert len(audit_events(world, "checkpoint.proposal.escalated")) == 1
            _deliver(world)
            assert _types(leads) == ["proposal.escalated"]
        finally:
            other.db.dispose()
            _dispatcher(world).stop()
            world.client.close()
            world.checkpoint.db.dispose()


def test_a_rule_that_names_only_a_channel_tells_it_and_restricts_no_one(tmp_path: Path) -> None:
    with receiver() as ops, receiver() as everyone:
        hooks = _channels(tmp_path, **{"ops-hook": ops.url, "everyone": everyone.url})
        text = f"""version = 1
[[rule]]
name = "ops-told"
effect = "approve"
match.tags = [{{ key = "team", value_prefix = "ops" }}]
notify = ["ops-hook"]
[notify]
{hooks}"""
        policy = Policy.from_bytes(text.encode(), "test")
        world = make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, policy)
        try:
            told = world.submit(proposal_id=PID, resource_id="i-ops00001", tags={"team": "ops"})
            assert world.submit(proposal_id="prop_plain00000002").status_code == 201
            # Any approver may approve it: a channel is no group.
            assert world.approve("carol", PID, told.json()["action_hash"]).status_code == 200
            _deliver(world)
            assert _types(ops) == ["proposal.needs_vote", "proposal.approved"]
            assert len(_types(everyone)) == 3
            assert json.loads(ops.got()[0].body)["data"]["groups"] == []
        finally:
            _dispatcher(world).stop()
            world.client.close()
            world.checkpoint.db.dispose()


def test_an_edit_of_an_escalated_proposal_stays_escalated(tmp_path: Path) -> None:
    policy = Policy.from_bytes(
        REFUNDS.replace(b'route = ["payments"]', b'route = ["payments", "leads"]\nsla = "1h"')
        + b'[groups.leads]\nmembers = ["carol"]\n',
        "test",
    )
    world = make_world(f"sqlite:///{tmp_path / 'cp.db'}", tmp_path, policy)
    try:
        old = submit_tool(world).json()
        world.clock.advance(SLA_S)
        assert world.checkpoint.sweep()["escalated"] == 1
        body = {"action_hash": old["action_hash"], "set": {"amount": 1500}, "note": ""}
        made = world.client.post(
            f"/v1/proposals/{old['id']}/edit", json=body, headers=world.auth("carol")
        )
        assert made.status_code == 200 and made.json()["state"] == "approved", made.text
        assert _level(world, made.json()["id"]) == 1
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


@contextmanager
def _route_reads(world: World) -> Iterator[list[str]]:
    """Each SELECT of ``proposal_routes`` run on the checkpoint's engine while in use."""
    seen: list[str] = []

    def count(conn: object, cursor: object, statement: str, *rest: object) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM proposal_routes" in statement:
            seen.append(statement)

    sa.event.listen(world.checkpoint.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        sa.event.remove(world.checkpoint.engine, "before_cursor_execute", count)


def test_an_approve_reads_its_route_once(routed: Routed) -> None:
    world = routed.world
    proposal = _submit(world)
    with _route_reads(world) as seen:
        approved = world.approve("alice", PID, str(proposal["action_hash"]))
    assert approved.status_code == 200 and approved.json()["state"] == "approved"
    # Checked at vote and at signing, its event told, its answer's route shown: one read.
    assert len(seen) == 1
    assert approved.json()["route"]["may_vote"] is True


def test_a_route_read_in_an_earlier_transaction_is_never_reused(routed: Routed) -> None:
    world = routed.world
    _submit(world)
    with world.checkpoint.engine.connect() as conn:
        with conn.begin():
            assert routed_route(conn, PID).level == 0
        # Escalated behind this connection's back, by another connection.
        with world.checkpoint.engine.begin() as other:
            other.execute(
                proposal_routes.update().where(proposal_routes.c.proposal_id == PID).values(level=1)
            )
        with conn.begin():
            assert routed_route(conn, PID).level == 1


def test_an_escalation_is_seen_by_a_later_read_in_its_transaction(routed: Routed) -> None:
    world = routed.world
    _submit(world)
    world.clock.advance(SLA_S)
    notify = world.checkpoint.policy.notify
    with world.checkpoint.engine.begin() as conn:
        assert routed_route(conn, PID).level == 0
        assert escalate(conn, notify, world.clock()) == 1
        assert routed_route(conn, PID).level == 1
    _deliver(world)
    # Its event went to the group escalated to, read after the move.
    assert _types(routed.leads) == ["proposal.escalated"]


def test_an_escalation_rolled_back_to_a_savepoint_is_not_answered_from_the_memo(
    routed: Routed,
) -> None:
    # A route moved inside a savepoint that then rolls back: the memo (tied to the whole
    # transaction) must not keep the rolled-back level, which would let the escalated
    # group vote on a proposal not yet escalated to it.
    world = routed.world
    _submit(world)
    world.clock.advance(SLA_S)
    notify = world.checkpoint.policy.notify
    with world.checkpoint.engine.begin() as conn:
        assert routed_route(conn, PID).level == 0
        savepoint = conn.begin_nested()
        assert escalate(conn, notify, world.clock()) == 1
        assert routed_route(conn, PID).level == 1
        savepoint.rollback()
        assert routed_route(conn, PID).level == 0
        conn.rollback()
    assert _level(world) == 0
