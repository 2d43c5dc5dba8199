"""The JSON shapes devcloud answers and the admin API reads (dev and tests only).

The RPC answers copy Alibaba Cloud's shapes, which the Alibaba adapter parses at its own
boundary (``airlock.cloud.alibaba``); here they are :data:`JsonObject`, so that only JSON
values go into them. The admin API's request bodies are pydantic models with
``extra="forbid"``, parsed once when a request arrives; its write log is
:class:`WriteRecord`.
"""

from __future__ import annotations

from typing import Literal, TypeAlias, TypedDict

from pydantic import BaseModel, ConfigDict

__all__ = [
    "FaultsChange",
    "InstanceChange",
    "Json",
    "JsonObject",
    "NewInstance",
    "NewInstances",
    "SeedRequest",
    "WriteRecord",
]

#: A JSON value, as :func:`json.dumps` writes it.
Json: TypeAlias = "str | int | float | bool | list[Json] | dict[str, Json] | None"
#: A JSON object: what every RPC action answers.
JsonObject: TypeAlias = dict[str, Json]

#: The region the admin API puts an instance in when the request names none.
_REGION = "ap-southeast-1"


class WriteRecord(TypedDict):
    """One effect devcloud applied, as ``GET /_admin/writes`` lists it."""

    seq: int
    at: float
    action: str
    resource_id: str
    region: str
    client_token: str | None
    request_id: str
    access_key_id: str
    #: Every parameter of the write exactly as received.
    params: dict[str, str]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SeedRequest(_Body):
    """``POST /_admin/seed``: replace (or extend) the fleet with a generated one."""

    seed: int = 0
    instances: int = 0
    rds: int = 0
    #: Unix seconds the fleet's ages are counted back from; devcloud's now when absent.
    now: int | None = None
    regions: tuple[str, ...] = (_REGION,)
    replace: bool = True


class NewInstance(_Body):
    """One instance for ``POST /_admin/instances``; only ``id`` is required."""

    id: str
    kind: Literal["ecs", "rds"] = "ecs"
    region: str = _REGION
    #: The instance's name; its id when absent.
    name: str | None = None
    status: str = "Running"
    instance_type: str = "ecs.g7.large"
    #: Unix seconds; thirty days before devcloud's now when absent.
    created_at: int | None = None
    tags: tuple[tuple[str, str], ...] = ()
    truth: str = ""
    profile: str = "idle"
    has_memory: bool = True


class NewInstances(_Body):
    """``POST /_admin/instances``."""

    instances: tuple[NewInstance, ...]


class InstanceChange(_Body):
    """``PATCH /_admin/instances/{id}``: an out-of-band change, never in the write log."""

    status: str | None = None
    #: Replaces every tag when given.
    tags: tuple[tuple[str, str], ...] | None = None
    add_tags: tuple[tuple[str, str], ...] = ()
    remove_tags: tuple[str, ...] = ()
    #: Unix seconds for StartTime when this change starts the instance.
    started_at: int | None = None


class FaultsChange(_Body):
    """``POST /_admin/faults``: the fault settings to change; the others are kept."""

    latency_ms: int | None = None
    write_latency_ms: int | None = None
    fail_next_writes: int | None = None
    fail_kind: Literal["unavailable", "internal", "throttling"] | None = None
    drop_next_writes: int | None = None
    drop_delay_ms: int | None = None
    drop_mode: Literal["timeout", "reset"] | None = None
    fail_next_reads: int | None = None
