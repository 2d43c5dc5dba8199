"""devcloud fixtures for the adapter tests: one seeded server per module, faults reset.

The reusable launcher lives in ``devstack.devcloud`` (other tests, eval and bench use it
directly); these fixtures only pick sizes and scopes for this directory.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from devstack.devcloud import DevcloudHandle, running_devcloud

#: A fixed anchor so the seeded fleet (and its metrics) are the same on every run.
FLEET_NOW = 1_795_000_000 - 1_795_000_000 % 3600
FLEET_SEED = 11
#: > 3 pages at the default page size of 100 for ECS, and of 10 (chosen in tests) for RDS.
FLEET_ECS = 350
FLEET_RDS = 45


@pytest.fixture(scope="module")
def devcloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevcloudHandle]:
    with running_devcloud(
        tmp_path_factory.mktemp("devcloud"),
        instances=FLEET_ECS,
        rds=FLEET_RDS,
        seed=FLEET_SEED,
        now=FLEET_NOW,
        transition_seconds=0.3,
    ) as handle:
        yield handle


@pytest.fixture(autouse=True)
def _clean_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "devcloud" in request.fixturenames:
        request.getfixturevalue("devcloud").admin.reset_faults()


_counter = iter(range(10**9))


@pytest.fixture
def fresh_ecs_id() -> str:
    """A new, unused ECS instance id in the kernel's format."""
    return f"i-test{int(time.time() * 1000):x}{next(_counter):04d}"
