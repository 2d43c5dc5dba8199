"""``AlibabaWriter``: the Alibaba Cloud ``CloudWriter``, for the executor only.

It performs exactly the allowlisted writes — ECS ``StopInstance`` (with ``StoppedMode``,
never forced), ECS ``DeleteInstances`` (with ``ClientToken``, never forced) and RDS
``StopDBInstance`` — and nothing else.

This module is the only one in the kernel that can change anything at the provider, so it
stands alone: :mod:`airlock.cloud.alibaba` does not import or re-export it, and
import-linter forbids the agent (``services.agent``, ``airlock.cli._agent``) from importing
it directly or through any chain (``pyproject.toml``, docs/architecture.md#import-boundaries).

It must never retry a write: the SDK's retry machinery is switched off explicitly
(:class:`~airlock.cloud.alibaba._common.Clients`), because a blind retry of a call whose
first attempt may have landed is a double write. Unknown outcomes are raised as
:class:`~airlock.cloud.ports.UnknownOutcome` for the caller to probe.
"""

from __future__ import annotations

from typing import Final

from airlock.cloud.ports import WriteResult

from ._common import ECS_ID, RDS_ID, AlibabaConfig, Clients, call, sdk

__all__ = ["AlibabaWriter"]

_STOPPED_MODES: Final = frozenset({"StopCharging", "KeepCharging"})


class AlibabaWriter:
    """``CloudWriter`` over the SDKs: the allowlisted writes and nothing else.

    Give it the write key. Each method makes exactly one HTTP attempt.
    """

    def __init__(self, config: AlibabaConfig) -> None:
        self._clients = Clients(config)

    def stop_ecs(self, region: str, instance_id: str, *, stopped_mode: str) -> WriteResult:
        if not ECS_ID.fullmatch(instance_id):
            raise ValueError(f"not an ECS instance id: {instance_id!r}")
        if stopped_mode not in _STOPPED_MODES:
            raise ValueError(f"stopped_mode must be one of {sorted(_STOPPED_MODES)}")
        client = self._clients.get("ecs", region)
        request = sdk("ecs").models.StopInstanceRequest(
            instance_id=instance_id,
            stopped_mode=stopped_mode,
            force_stop=False,  # a forced stop can lose unflushed data; never ours to choose
            dry_run=False,
        )
        resp = call(client.stop_instance_with_options, request, self._clients.runtime())
        return WriteResult(request_id=str(resp.body.request_id or ""))

    def delete_ecs(self, region: str, instance_id: str, *, client_token: str) -> WriteResult:
        if not ECS_ID.fullmatch(instance_id):
            raise ValueError(f"not an ECS instance id: {instance_id!r}")
        # Alibaba: ClientToken is ASCII, at most 64 characters.
        if not client_token or len(client_token) > 64 or not client_token.isascii():
            raise ValueError("client_token must be 1..64 ASCII characters")
        client = self._clients.get("ecs", region)
        request = sdk("ecs").models.DeleteInstancesRequest(
            region_id=region,
            instance_id=[instance_id],
            client_token=client_token,
            force=False,  # the API then refuses a running instance: delete only what is stopped
            dry_run=False,
        )
        resp = call(client.delete_instances_with_options, request, self._clients.runtime())
        return WriteResult(request_id=str(resp.body.request_id or ""))

    def stop_rds(self, region: str, instance_id: str) -> WriteResult:
        if not RDS_ID.fullmatch(instance_id):
            raise ValueError(f"not an RDS instance id: {instance_id!r}")
        client = self._clients.get("rds", region)
        request = sdk("rds").models.StopDBInstanceRequest(
            region_id=region, dbinstance_id=instance_id
        )
        resp = call(client.stop_dbinstance_with_options, request, self._clients.runtime())
        return WriteResult(request_id=str(resp.body.request_id or ""))
