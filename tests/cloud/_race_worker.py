"""Worker for the racing-writers test (a module of its own so any start method can import it)."""

from __future__ import annotations

from typing import Any

from airlock.cloud.alibaba import AlibabaConfig
from airlock.cloud.alibaba.writer import AlibabaWriter
from airlock.cloud.ports import CloudError


def race(
    *, config: AlibabaConfig, op: str, instance_id: str, token: str, barrier: Any, out: Any
) -> None:
    writer = AlibabaWriter(config)
    barrier.wait(timeout=30)
    try:
        if op == "delete":
            result = writer.delete_ecs("ap-southeast-1", instance_id, client_token=token)
        else:
            result = writer.stop_ecs("ap-southeast-1", instance_id, stopped_mode="StopCharging")
        out.put(("ok", result.request_id))
    except CloudError as exc:
        out.put((type(exc).__name__, exc.code))
