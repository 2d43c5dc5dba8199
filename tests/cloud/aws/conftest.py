"""moto fixtures for the AWS adapter tests: one moto server per module, in server mode.

The launcher lives in ``devstack.moto`` (the executor tests, eval and bench use it too);
this only picks sizes and scopes. moto is reached over HTTP on 127.0.0.1 with signed
requests, never through its in-process mock.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from devstack.moto import MotoHandle, running_moto

#: 2,000 instances in two regions, 100 to a reservation. At 10 reservations a page that
#: is 2 pages in us-east-1 and 1 in eu-west-1: 3 pages.
FLEET: tuple[dict[str, object], ...] = (
    {"region": "us-east-1", "count": 1200, "tags": {"fleet": "scan", "team": "data"}},
    {"region": "eu-west-1", "count": 800, "tags": {"fleet": "scan", "team": "web"}},
)


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoHandle]:
    """A moto server with IAM users (reader, writer, admin), IAM enforced, no fleet."""
    with running_moto(tmp_path_factory.mktemp("moto")) as handle:
        handle.enforce_auth()
        yield handle


#: Two EC2 instances launched three days ago, apart from the fleet: old enough for the
#: agent to judge over a two-day window.
AGED: dict[str, object] = {
    "region": "ca-central-1",
    "count": 2,
    "tags": {"team": "data"},
    "launched": int(time.time()) - 3 * 86_400,
}


@pytest.fixture(scope="module")
def moto_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoHandle]:
    """A moto server holding :data:`FLEET` and :data:`AGED`, seeded before it serves; IAM
    enforced."""
    with running_moto(tmp_path_factory.mktemp("moto-fleet"), fleet=(*FLEET, AGED)) as handle:
        handle.enforce_auth()
        yield handle


_names = itertools.count()


@pytest.fixture
def rds_name() -> str:
    """A new DB instance identifier for this test."""
    return f"db-test-{next(_names)}"
