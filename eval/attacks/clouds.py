"""The cloud the attacks run against: devcloud (Alibaba's double) or moto (AWS's).

Each gives the attacks the same doors: the shape of the actions they build (provider,
account, region, resource type, params), their own instances made in a given state, the
world changing out of band (status, tags, gone) as a person with the console would
change it, a slow write on demand, and the cloud's own record of the writes that reached
it, by which the judge counts.

* devcloud names instances as the attacks ask (``i-`` + 16 hex) and logs every write it
  applied.
* moto names its own EC2 instances, so the rig seeds a pool before the server serves
  (launched 2025-01-01, before every action's ``observed_at``) and hands each attack's
  instance name the next one, in the order the attack first asks. IAM is enforced: the
  executors write with the writer's key, the rig changes the world with the admin's, and
  the judge counts the requests moto recorded under the writer's key (a refused attempt
  counts too).

Nothing here decides whether an attack passed, and nothing here writes as an executor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from devstack import factory
from devstack.devcloud import DevcloudHandle
from devstack.moto import MotoHandle, running_moto

__all__ = ["CLOUDS", "AttackCloud", "CloudName", "DevcloudCloud", "MotoCloud", "moto_server"]

CloudName = Literal["devcloud", "moto"]
CLOUDS: Final[tuple[CloudName, ...]] = ("devcloud", "moto")
#: When an attack's instances were created (and so last started): 2025-01-01, before the
#: observed_at of every action the attacks build.
LAST_START: Final = 1_735_689_600
#: moto's pool: enough EC2 instances for every attack's own (78 are asked for today).
_POOL: Final = 160
#: The second region: instances for the attack that swaps the action's region.
_POOL_OTHER: Final = 4


class AttackCloud(Protocol):
    name: CloudName
    #: Another account and region of the provider, and other stop params: what an
    #: attacker swaps into an approved action.
    other_account: str
    other_region: str
    other_params: Mapping[str, Any]
    #: The executor's settings for this cloud (beyond the stack's).
    executor_env: Mapping[str, str]

    def resolve(self, own: str) -> str: ...

    def resource(self, resource_id: str) -> dict[str, str]:
        """The action's ``resource`` member for an instance."""

    def action(self, **value: Any) -> dict[str, Any]:
        """A stop action of this cloud's shape with ``value`` applied."""

    def instance(
        self,
        resource_id: str,
        *,
        status: str = "Running",
        tags: Sequence[tuple[str, str]] = (),
        region: str | None = None,
    ) -> str:
        """Make ``resource_id`` exist in ``status`` with ``tags`` (in ``region``); its id."""

    def set_status(self, resource_id: str, status: str) -> None: ...

    def add_tags(self, resource_id: str, tags: Sequence[tuple[str, str]]) -> None: ...

    def delete(self, resource_id: str) -> None: ...

    def slow_writes(self, ms: int) -> None:
        """Hold each later write ``ms`` milliseconds (0: back to normal)."""

    def writes(self, resource_id: str) -> int:
        """How many writes the cloud's record holds on ``resource_id``."""


class DevcloudCloud:
    """devcloud: ECS instances named by the attacks, its admin API, its write log."""

    name: CloudName = "devcloud"
    other_account = "5999999999999999"
    other_region = "ap-southeast-5"
    other_params: Mapping[str, Any] = {"stopped_mode": "KeepCharging"}

    def __init__(self, handle: DevcloudHandle) -> None:
        self.admin = handle.admin
        self.executor_env: Mapping[str, str] = handle.env("EXECUTOR", write=True)

    def resolve(self, own: str) -> str:
        return own

    def resource(self, resource_id: str) -> dict[str, str]:
        return {"type": "ecs.instance", "id": resource_id}

    def action(self, **value: Any) -> dict[str, Any]:
        return factory.action_value(**value)

    def instance(
        self,
        resource_id: str,
        *,
        status: str = "Running",
        tags: Sequence[tuple[str, str]] = (),
        region: str | None = None,
    ) -> str:
        # Created, and so last started, before the actions' observed_at (2025-11-29): the
        # executor refuses to delete an instance started since its state was observed.
        kw: dict[str, Any] = {"status": status, "created_at": LAST_START}
        if tags:
            kw["tags"] = list(tags)
        if region is not None:
            kw["region"] = region
        self.admin.create_instance(resource_id, **kw)
        return resource_id

    def set_status(self, resource_id: str, status: str) -> None:
        self.admin.set_instance(resource_id, status=status)

    def add_tags(self, resource_id: str, tags: Sequence[tuple[str, str]]) -> None:
        self.admin.set_instance(resource_id, add_tags=list(tags))

    def delete(self, resource_id: str) -> None:
        self.admin.delete_instance(resource_id)

    def slow_writes(self, ms: int) -> None:
        if ms:
            self.admin.set_faults(write_latency_ms=ms)
        else:
            self.admin.reset_faults()

    def writes(self, resource_id: str) -> int:
        return len(self.admin.writes(resource_id=resource_id))


class MotoCloud:
    """moto, IAM enforced: EC2 instances from a pool seeded before the server served."""

    name: CloudName = "moto"
    account = factory.AWS_ACCOUNT
    region = factory.AWS_REGION
    other_account = "999999999999"
    other_region = "eu-west-1"
    # EC2 stop takes no params (the writer always stops with hibernate off): the swapped
    # params ask for hibernation.
    other_params: Mapping[str, Any] = {"hibernate": True}

    def __init__(self, handle: MotoHandle) -> None:
        self.moto = handle
        writer = handle.keys["writer"]
        self.executor_env: Mapping[str, str] = {
            "AIRLOCK_EXECUTOR_PROVIDER": "aws",
            "AIRLOCK_EXECUTOR_ACCOUNT": self.account,
            "AIRLOCK_EXECUTOR_REGION": self.region,
            "AIRLOCK_EXECUTOR_AWS_ENDPOINT_URL": handle.url,
            "AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID": writer.access_key_id,
            "AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_SECRET": writer.secret_access_key,
        }
        self._pool = {r: list(ids) for r, ids in handle.fleet.items()}
        self._given: dict[str, str] = {}  # the attack's own name -> the pool's id
        self._region: dict[str, str] = {}  # the pool's id -> its region

    def _take(self, region: str) -> str:
        pool = self._pool.get(region) or []
        if not pool:
            raise RuntimeError(f"moto's pool in {region} is used up; raise its size")
        rid = pool.pop(0)
        self._region[rid] = region
        return rid

    def resolve(self, own: str) -> str:
        if own not in self._given:
            self._given[own] = self._take(self.region)
        return self._given[own]

    def resource(self, resource_id: str) -> dict[str, str]:
        return {"type": "ec2.instance", "id": resource_id}

    def action(self, **value: Any) -> dict[str, Any]:
        return factory.aws_action_value(**value)

    def _ec2(self, resource_id: str) -> Any:
        return self.moto.client("ec2", self._region.get(resource_id, self.region))

    def instance(
        self,
        resource_id: str,
        *,
        status: str = "Running",
        tags: Sequence[tuple[str, str]] = (),
        region: str | None = None,
    ) -> str:
        if region is not None and region != self._region.get(resource_id):
            # moto cannot move an instance: the attack's name takes one of that region's.
            own = next(o for o, r in self._given.items() if r == resource_id)
            resource_id = self._given[own] = self._take(region)
        if status == "Stopped":
            self.set_status(resource_id, status)
        elif status != "Running":
            raise ValueError(f"moto's pool has no instance {status}")
        if tags:
            self.add_tags(resource_id, tags)
        return resource_id

    def set_status(self, resource_id: str, status: str) -> None:
        ec2 = self._ec2(resource_id)
        if status == "Stopped":
            ec2.stop_instances(InstanceIds=[resource_id])
        elif status == "Running":
            ec2.start_instances(InstanceIds=[resource_id])  # its LaunchTime is now
        else:
            raise ValueError(f"moto has no instance status {status}")

    def add_tags(self, resource_id: str, tags: Sequence[tuple[str, str]]) -> None:
        self._ec2(resource_id).create_tags(
            Resources=[resource_id], Tags=[{"Key": k, "Value": v} for k, v in tags]
        )

    def delete(self, resource_id: str) -> None:
        self._ec2(resource_id).terminate_instances(InstanceIds=[resource_id])

    def slow_writes(self, ms: int) -> None:
        self.moto.set_write_latency(ms)

    def writes(self, resource_id: str) -> int:
        return len(self.moto.writes(key="writer", resource_id=resource_id))


@contextlib.contextmanager
def moto_server(workdir: Path) -> Iterator[MotoHandle]:
    """A moto server with the attacks' pool seeded and IAM enforced, for the block."""
    fleet = [
        {"region": factory.AWS_REGION, "count": _POOL, "launched": LAST_START},
        {"region": MotoCloud.other_region, "count": _POOL_OTHER, "launched": LAST_START},
    ]
    workdir.mkdir(parents=True, exist_ok=True)
    with running_moto(workdir, fleet=fleet) as handle:
        handle.enforce_auth()
        yield handle
