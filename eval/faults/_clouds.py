"""The cloud a sweep runs against: devcloud (Alibaba's double) or moto (AWS's).

Each gives the sweep the same few doors: make a seed's target, change it out of band,
inject the faults the double can, and its own record of the writes that reached it (the
exactly-once judge). devcloud's write log holds every effect it applied; moto's recorder
holds every request that reached the server, before moto acted on it, so a refused
attempt counts too. Only devcloud can fail, drop or slow a write on demand: a moto sweep
draws no ``devcloud.*`` fault.

Nothing here decides whether an invariant held.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol

from devstack.devcloud import DevcloudHandle
from devstack.moto import ACCOUNT as AWS_ACCOUNT
from devstack.moto import MotoHandle
from devstack.stack import ACCOUNT, REGION

from ._schedule import Fault, Target

__all__ = ["AWS_REGION", "Cloud", "CloudName", "Devcloud", "Moto", "Write"]

CloudName = Literal["devcloud", "moto"]
AWS_REGION: Final = "us-east-1"
PROTECT_TAG: Final = "airlock:protect"
#: devcloud: when every target was created (and so last started), 2025-11-01, before the
#: actions' observed_at.
_LAST_START: Final = 1_761_955_200
#: A dropped answer (drop_mode=timeout) is withheld past the executor's read timeout.
DROP_DELAY_MS: Final = 1000


@dataclass(frozen=True, slots=True)
class Write:
    """One write the cloud's own record holds: its action and the resource it names."""

    action: str
    resource_id: str


class Cloud(Protocol):
    name: CloudName
    #: The executor's settings for this cloud (timeouts and the sweep's lease included).
    executor_env: Mapping[str, str]

    def create(self, target: Target) -> str:
        """Make ``target``'s own resource in its initial status; its id at the cloud."""

    def action(self, target: Target, resource_id: str) -> dict[str, Any]:
        """The ProposedAction the agent submits for ``target``."""

    def drift(self, target: Target, resource_id: str, kind: str) -> None:
        """Change the resource out of band: ``status``, ``protect`` or ``gone``."""

    def inject(self, fault: Fault) -> str:
        """Apply a fault of the double's own (``devcloud.*``); a note of what it did."""

    def reset_faults(self) -> None: ...

    def writes(self, resource_id: str | None = None) -> list[Write]:
        """Every write the cloud recorded (on ``resource_id``), oldest first."""

    def verb(self, target: Target, resource_id: str) -> str:
        """What the action name of an approved write of ``target`` contains."""


def _precondition(status: str, observed_at: str) -> dict[str, Any]:
    return {"status": status, "absent_tags": [PROTECT_TAG], "observed_at": observed_at}


def _action(
    target: Target, *, provider: str, account: str, region: str, resource: dict[str, str]
) -> dict[str, Any]:
    return {
        "type": "airlock.action/v1",
        "proposal_id": target.proposal_id,
        "provider": provider,
        "account": account,
        "region": region,
        "resource": resource,
        "operation": target.operation,
        "evidence": {"policy": "idle/v1", "window_days": 14, "cpu_p95_bp": 340},
        "reason": "fault sweep",
        "proposed_by": "agent:scanner-1",
    }


class Devcloud:
    """devcloud: ECS instances named by the schedule, its write log, its fault switches."""

    name: CloudName = "devcloud"
    # Short lease and frequent recovery so a row left by a crash is taken over within
    # seconds; the lease must exceed twice the cloud timeouts (ExecutorSettings refuses
    # less), so 2 s over (200 + 700) ms.
    executor_env: Mapping[str, str] = {
        "AIRLOCK_EXECUTOR_LEASE_SECONDS": "2",
        "AIRLOCK_EXECUTOR_RECOVER_EVERY": "1",
        "AIRLOCK_EXECUTOR_CLOUD_CONNECT_TIMEOUT_MS": "200",
        "AIRLOCK_EXECUTOR_CLOUD_READ_TIMEOUT_MS": "700",
    }

    def __init__(self, handle: DevcloudHandle) -> None:
        self.admin = handle.admin

    def create(self, target: Target) -> str:
        # Created, and so last started, before the action's observed_at: the executor
        # refuses to delete an instance started since its state was observed.
        self.admin.create_instance(
            target.resource_id, status=target.initial_status, created_at=_LAST_START
        )
        return target.resource_id

    def action(self, target: Target, resource_id: str) -> dict[str, Any]:
        value = _action(
            target,
            provider="alibaba",
            account=ACCOUNT,
            region=REGION,
            resource={"type": "ecs.instance", "id": resource_id},
        )
        value["params"] = {"stopped_mode": "StopCharging"} if target.operation == "stop" else {}
        value["precondition"] = _precondition(target.initial_status, "2026-11-29T06:00:00Z")
        value["created_at"] = "2026-11-29T06:00:05Z"
        return value

    def drift(self, target: Target, resource_id: str, kind: str) -> None:
        if kind == "status":
            other = "Stopped" if target.operation == "stop" else "Running"
            self.admin.set_instance(resource_id, status=other)
        elif kind == "protect":
            self.admin.set_instance(resource_id, add_tags=[(PROTECT_TAG, "true")])
        else:
            self.admin.delete_instance(resource_id)

    def inject(self, fault: Fault) -> str:
        match fault.kind:
            case "devcloud.fail":
                self.admin.set_faults(fail_next_writes=fault.n, fail_kind=fault.arg)
                return f"next {fault.n} writes fail with {fault.arg}"
            case "devcloud.drop":
                self.admin.set_faults(
                    drop_next_writes=fault.n, drop_mode=fault.arg, drop_delay_ms=DROP_DELAY_MS
                )
                return f"next {fault.n} writes apply, then the answer is dropped ({fault.arg})"
            case "devcloud.latency":
                self.admin.set_faults(write_latency_ms=fault.n)
                return f"writes delayed {fault.n} ms"
        raise ValueError(f"devcloud has no fault {fault.kind}")

    def reset_faults(self) -> None:
        self.admin.reset_faults()

    def writes(self, resource_id: str | None = None) -> list[Write]:
        found = self.admin.writes(resource_id=resource_id) if resource_id else self.admin.writes()
        return [Write(str(w["action"]), str(w["resource_id"])) for w in found]

    def verb(self, target: Target, resource_id: str) -> str:
        return "Stop" if target.operation == "stop" else "Delete"


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Moto:
    """moto, IAM enforced: the executor writes with the writer's key; the sweep makes and
    changes resources as the admin. A stop target of odd index is an RDS instance (named
    by the schedule), any other target an EC2 instance (named by moto); a delete is an
    EC2 terminate."""

    name: CloudName = "moto"

    def __init__(self, handle: MotoHandle) -> None:
        self.moto = handle
        writer = handle.keys["writer"]
        # moto answers slower than devcloud on a busy machine; the lease still exceeds
        # twice the cloud timeouts, 6 s over (500 + 2000) ms.
        self.executor_env: Mapping[str, str] = {
            "AIRLOCK_EXECUTOR_LEASE_SECONDS": "6",
            "AIRLOCK_EXECUTOR_RECOVER_EVERY": "1",
            "AIRLOCK_EXECUTOR_CLOUD_CONNECT_TIMEOUT_MS": "500",
            "AIRLOCK_EXECUTOR_CLOUD_READ_TIMEOUT_MS": "2000",
            "AIRLOCK_EXECUTOR_PROVIDER": "aws",
            "AIRLOCK_EXECUTOR_ACCOUNT": AWS_ACCOUNT,
            "AIRLOCK_EXECUTOR_REGION": AWS_REGION,
            "AIRLOCK_EXECUTOR_AWS_ENDPOINT_URL": handle.url,
            "AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID": writer.access_key_id,
            "AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_SECRET": writer.secret_access_key,
        }
        self._ec2 = handle.client("ec2", AWS_REGION)
        self._rds = handle.client("rds", AWS_REGION)
        self._observed: dict[str, str] = {}

    @staticmethod
    def _is_rds(target: Target) -> bool:
        return target.operation == "stop" and target.index % 2 == 1

    def create(self, target: Target) -> str:
        if self._is_rds(target):
            rid = target.proposal_id.removeprefix("prop_").replace("n", "-n")
            self.moto.seed_rds(AWS_REGION, rid)
        else:
            (rid,) = self.moto.seed_ec2(AWS_REGION, 1)
            if target.operation == "delete":
                self._ec2.stop_instances(InstanceIds=[rid])
        # Observed in a later minute than the launch: the executor terminates only an
        # instance not started since its state was observed.
        self._observed[rid] = _rfc3339(time.time() + 60)
        return rid

    def action(self, target: Target, resource_id: str) -> dict[str, Any]:
        rtype = "rds.instance" if self._is_rds(target) else "ec2.instance"
        value = _action(
            target,
            provider="aws",
            account=AWS_ACCOUNT,
            region=AWS_REGION,
            resource={"type": rtype, "id": resource_id},
        )
        observed = self._observed[resource_id]
        value["params"] = {}
        value["precondition"] = _precondition(target.initial_status, observed)
        value["created_at"] = observed
        return value

    def drift(self, target: Target, resource_id: str, kind: str) -> None:
        if self._is_rds(target):
            if kind == "status":
                self._rds.stop_db_instance(DBInstanceIdentifier=resource_id)
            elif kind == "protect":
                arn = f"arn:aws:rds:{AWS_REGION}:{AWS_ACCOUNT}:db:{resource_id}"
                self._rds.add_tags_to_resource(
                    ResourceName=arn, Tags=[{"Key": PROTECT_TAG, "Value": "true"}]
                )
            else:
                self._rds.delete_db_instance(
                    DBInstanceIdentifier=resource_id, SkipFinalSnapshot=True
                )
        elif kind == "status":
            if target.operation == "stop":
                self._ec2.stop_instances(InstanceIds=[resource_id])
            else:
                self._ec2.start_instances(InstanceIds=[resource_id])
        elif kind == "protect":
            self._ec2.create_tags(
                Resources=[resource_id], Tags=[{"Key": PROTECT_TAG, "Value": "true"}]
            )
        else:
            self._ec2.terminate_instances(InstanceIds=[resource_id])

    def inject(self, fault: Fault) -> str:
        raise ValueError(f"moto has no fault {fault.kind}")

    def reset_faults(self) -> None:
        return None  # moto takes no faults

    def writes(self, resource_id: str | None = None) -> list[Write]:
        return [
            Write(w.action, rid)
            for w in self.moto.writes(key="writer")
            for rid in w.ids
            if resource_id is None or rid == resource_id
        ]

    def verb(self, target: Target, resource_id: str) -> str:
        if self._is_rds(target):
            return "StopDBInstance"
        return "StopInstances" if target.operation == "stop" else "TerminateInstances"
