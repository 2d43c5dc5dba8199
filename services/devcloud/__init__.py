"""devcloud: a local Alibaba Cloud double (ECS, RDS, CloudMonitor) for dev and tests only.

It answers the official SDKs over HTTP with signature checks and two scoped keys, keeps
its fleet in SQLite, and offers a token-guarded admin API (write log, fault injection,
out-of-band changes). It must never be deployed as, or mistaken for, a real cloud: its
settings refuse to load outside ``AIRLOCK_ENV=dev``.
"""

from __future__ import annotations

from .app import ACCOUNT_ID, create_app
from .demo import demo_names
from .fleet import InstanceSpec, generate_fleet
from .store import Store

__all__ = [
    "ACCOUNT_ID",
    "InstanceSpec",
    "Store",
    "create_app",
    "demo_names",
    "generate_fleet",
    "seed_store",
]


def seed_store(
    store: Store,
    *,
    seed: int,
    instances: int,
    rds: int,
    now: int,
    regions: tuple[str, ...] = ("ap-southeast-1",),
    replace: bool = True,
    demo: bool = False,
) -> int:
    """Write a generated fleet into ``store``; the number of instances added.

    ``demo``: realistic names and tags (:func:`demo_names`) instead of the hostile ones
    the tests need.
    """
    fleet = generate_fleet(seed=seed, instances=instances, rds=rds, now=now, regions=regions)
    if demo:
        fleet = demo_names(fleet)
    if replace:
        store.clear_instances()
    store.set_meta("seed", str(seed))
    return store.add_instances(fleet)
