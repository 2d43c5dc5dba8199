"""``AwsWriter``: the AWS ``CloudWriter`` (an ``Ec2Writer``), for the executor only.

It performs exactly the allowlisted writes — EC2 ``StopInstances`` (``Hibernate`` and
``Force`` off), EC2 ``TerminateInstances`` and RDS ``StopDBInstance`` — one instance a
call, and nothing else. None of the three takes a client token.

This module is the only one in the kernel that can change anything at AWS, so it stands
alone: :mod:`airlock.cloud.aws` does not import or re-export it, and import-linter forbids
the agent from importing it directly or through any chain (``pyproject.toml``).

It must never retry a write: botocore's retries are switched off explicitly
(:class:`~airlock.cloud.aws._common.Clients`), because a blind retry of a call whose first
attempt may have landed is a double write. Unknown outcomes (timeouts, 5xx, throttling)
are raised as :class:`~airlock.cloud.ports.UnknownOutcome` for the caller to probe.
"""

from __future__ import annotations

from typing import Any

from airlock.cloud.ports import UnknownOutcome, WriteResult

from ._common import EC2_ID, RDS_ID, AwsConfig, Clients, call, request_id

__all__ = ["AwsWriter"]


def _answered_for(items: Any, key: str, resource_id: str, call_name: str) -> None:
    # A 200 that does not name the instance is not a write we can account for.
    if [item.get(key) for item in items or ()] != [resource_id]:
        raise UnknownOutcome(
            f"{call_name} answered for {[i.get(key) for i in items or ()]}, not {resource_id}",
            code="UnexpectedAnswer",
        )


class AwsWriter:
    """``Ec2Writer`` over boto3: the allowlisted writes and nothing else.

    Give it the executor's (write) credentials. Each method makes exactly one attempt.
    """

    def __init__(self, config: AwsConfig) -> None:
        self._clients = Clients(config)

    def stop_ec2(self, region: str, instance_id: str) -> WriteResult:
        if not EC2_ID.fullmatch(instance_id):
            raise ValueError(f"not an EC2 instance id: {instance_id!r}")
        answer = call(
            self._clients.ec2(region).stop_instances,
            InstanceIds=[instance_id],
            Hibernate=False,  # the approval says stop; hibernating is another operation
            Force=False,  # a forced stop can lose unflushed data; never ours to choose
            DryRun=False,
        )
        _answered_for(answer.get("StoppingInstances"), "InstanceId", instance_id, "StopInstances")
        return WriteResult(request_id=request_id(answer))

    def terminate_ec2(self, region: str, instance_id: str) -> WriteResult:
        if not EC2_ID.fullmatch(instance_id):
            raise ValueError(f"not an EC2 instance id: {instance_id!r}")
        answer = call(
            self._clients.ec2(region).terminate_instances, InstanceIds=[instance_id], DryRun=False
        )
        _answered_for(
            answer.get("TerminatingInstances"), "InstanceId", instance_id, "TerminateInstances"
        )
        return WriteResult(request_id=request_id(answer))

    def stop_rds(self, region: str, instance_id: str) -> WriteResult:
        if not RDS_ID.fullmatch(instance_id):
            raise ValueError(f"not an RDS instance identifier: {instance_id!r}")
        # No DBSnapshotIdentifier: a stop takes no snapshot Airlock would then own.
        answer = call(self._clients.rds(region).stop_db_instance, DBInstanceIdentifier=instance_id)
        db = answer.get("DBInstance", {})
        if db.get("DBInstanceIdentifier") != instance_id:
            raise UnknownOutcome(
                f"StopDBInstance answered for {db.get('DBInstanceIdentifier')!r}",
                code="UnexpectedAnswer",
            )
        return WriteResult(request_id=request_id(answer))
