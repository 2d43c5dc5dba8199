"""The agent against devcloud (a real subprocess, through the real SDK adapter) and a real
checkpoint (the ASGI app in process, on SQLite), sharing one injected clock.

The seeded fleet lives in :data:`REGION` and is never changed by a test; tests that change
instances out of band create their own in a region of their own, so they cannot disturb
each other or the fleet.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from airlock.cloud.ports import CloudReader
from airlock.settings import AgentSettings
from devstack.devcloud import DevcloudHandle, running_devcloud
from services.agent.client import HttpCheckpointClient
from services.agent.service import Agent, build_agent
from services.executor.receipts import Receipt, ReceiptSigner
from tests.checkpoint.harness import AUDIENCE, PASSWORD, START, World, opened_world

REGION = "ap-southeast-1"
#: The fleet is seeded at the checkpoint harness's start time, so the agent's clock, the
#: checkpoint's clock and the fleet's ages all agree.
FLEET_NOW = START
FLEET_SEED = 5
FLEET_ECS = 80
FLEET_RDS = 12
DAY = 86_400

_regions = itertools.count(1)


@pytest.fixture(scope="module")
def devcloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevcloudHandle]:
    with running_devcloud(
        tmp_path_factory.mktemp("devcloud"),
        instances=FLEET_ECS,
        rds=FLEET_RDS,
        seed=FLEET_SEED,
        now=FLEET_NOW,
        transition_seconds=0.0,  # a stop shows as Stopped at once: no waiting in tests
    ) as handle:
        yield handle


@pytest.fixture
def world(sqlite_url: str, tmp_path: Path) -> Iterator[World]:
    with opened_world(sqlite_url, tmp_path) as w:
        yield w


@dataclass
class Harness:
    dc: DevcloudHandle
    world: World
    sleeps: list[float] = field(default_factory=list)

    @property
    def now(self) -> int:
        return self.world.clock()

    def advance(self, seconds: int) -> None:
        self.set_time(self.now + seconds)

    def set_time(self, t: int) -> None:
        self.world.clock.t = t
        self.relogin()

    def settings(self, **overrides: Any) -> AgentSettings:
        values: dict[str, Any] = {"AIRLOCK_ENV": "dev", "cloud_regions": (REGION,)}
        values.update(overrides)
        return AgentSettings(**values)

    def client(
        self, *, http: httpx.Client | None = None, attempts: int = 6
    ) -> HttpCheckpointClient:
        return HttpCheckpointClient(
            "http://testserver",
            self.world.tokens["agent"],
            http=http or self.world.client,
            attempts=attempts,
            sleep=self.sleeps.append,
        )

    def agent(
        self,
        *,
        regions: tuple[str, ...] = (REGION,),
        client: HttpCheckpointClient | None = None,
        reader: CloudReader | None = None,
        **overrides: Any,
    ) -> Agent:
        return build_agent(
            self.settings(cloud_regions=regions, **overrides),
            reader=reader or self.dc.reader(),
            reader_factory=self.dc.reader,
            clock=self.world.clock,
            client=client or self.client(),
            sleep=self.sleeps.append,
        )

    # -- the checkpoint, as people and the executor use it

    def proposals(self, **filters: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 200, **filters}
        while True:
            page = self.world.client.get(
                "/v1/proposals", params=params, headers=self.world.auth("admin")
            ).json()
            items.extend(page["items"])
            if not page["next_before"]:
                return items
            params["before"] = page["next_before"]

    def relogin(self) -> None:
        """Sessions last an hour; a test that moves the clock by days signs in again."""
        for name in ("alice", "bob", "carol", "admin", "viewer"):
            self.world.tokens[name] = self.world.accounts.login(name, PASSWORD)[0]

    def approve(self, proposal: dict[str, Any], *who: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in who or ("alice",):
            confirm = (
                {"confirm": proposal["resource_id"]} if proposal["operation"] == "delete" else {}
            )
            r = self.world.approve(name, proposal["id"], proposal["action_hash"], **confirm)
            assert r.status_code == 200, r.text
            out = r.json()
        return out

    def reject(self, proposal: dict[str, Any], reason: str = "not_idle") -> None:
        r = self.world.client.post(
            f"/v1/proposals/{proposal['id']}/reject",
            json={"reason_code": reason, "note": "still needed"},
            headers=self.world.auth("alice"),
        )
        assert r.status_code == 200, r.text

    def execute_stop(self, proposal: dict[str, Any], signer: ReceiptSigner) -> None:
        """What the executor does for an approved stop: the write, then the signed receipt."""
        approved = self.approve(proposal)
        assert approved["state"] == "approved"
        self.dc.writer().stop_ecs(
            proposal["region"], proposal["resource_id"], stopped_mode="StopCharging"
        )
        receipt = Receipt(
            type="airlock.receipt/v1",
            executor=AUDIENCE,  # the audience the test checkpoint serves
            approval_id=approved["approval"]["approval_id"],
            action_hash=proposal["action_hash"],
            outcome="succeeded",
            verified=True,
            refusal_code=None,
            cloud_request_id="test",
            resolution=None,
            at=self.now,
            audit_head={"seq": 1, "hash": "sha256:" + "0" * 64},
            detail="",
        )
        r = self.world.client.post(
            "/v1/outcomes",
            json={"receipt": signer.sign(receipt).to_value()},
            headers=self.world.auth("executor"),
        )
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "executed"


@pytest.fixture
def harness(devcloud: DevcloudHandle, world: World) -> Harness:
    world.clock.t = FLEET_NOW
    return Harness(devcloud, world)


@pytest.fixture
def own_region() -> str:
    """A region no other test uses (devcloud serves any region name)."""
    return f"ap-test-{next(_regions)}"


def new_instance_id(region: str, n: int = 0) -> str:
    return f"i-{region.replace('-', '')}{n:04d}"


@pytest.fixture
def create_idle(devcloud: DevcloudHandle) -> Callable[..., str]:
    """Create one long-lived, idle ECS instance in ``region`` and return its id."""

    def make(region: str, n: int = 0, tags: tuple[tuple[str, str], ...] = ()) -> str:
        iid = new_instance_id(region, n)
        devcloud.admin.create_instance(
            iid,
            region=region,
            status="Running",
            tags=(("team", "data"), *tags),
            created_at=FLEET_NOW - 90 * DAY,
            profile="idle",
        )
        return iid

    return make
