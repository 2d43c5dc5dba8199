"""Provider data the agent cannot use is never evidence of idleness, and never stops a scan.

The agent runs against devcloud through the real adapter; where a test needs CloudMonitor
to answer something devcloud never sends, the adapter's CloudMonitor client is wrapped to
rewrite the real answer (the SDK seam), so everything above it is production code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from types import SimpleNamespace
from typing import Any

import pytest

from airlock.cloud.alibaba import ECS_METRICS, AlibabaReader

from .conftest import DAY, FLEET_NOW, Harness, new_instance_id


def _rewriting_cms(
    reader: AlibabaReader, rewrite: Callable[[str, dict[str, Any]], None]
) -> AlibabaReader:
    """``reader`` with every CloudMonitor datapoint passed through ``rewrite(metric, point)``."""
    real_get = reader._clients.get

    def get(product: str, region: str) -> Any:
        client = real_get(product, region)
        if product != "cms":
            return client

        def describe(request: Any, runtime: Any) -> Any:
            response = client.describe_metric_list_with_options(request, runtime)
            points = json.loads(response.body.datapoints or "[]")
            for point in points:
                rewrite(request.metric_name, point)
            response.body.datapoints = json.dumps(points)
            return response

        return SimpleNamespace(describe_metric_list_with_options=describe)

    reader._clients.get = get  # type: ignore[method-assign]
    return reader


def _drop_average(metrics: Collection[str]) -> Callable[[str, dict[str, Any]], None]:
    def rewrite(metric: str, point: dict[str, Any]) -> None:
        if metric in metrics:
            point.pop("Average", None)  # e.g. a metric reported as Minimum/Maximum/Sum only

    return rewrite


@pytest.mark.parametrize(
    ("profile", "metrics"),
    [
        # no Average anywhere: read as 0, a busy machine was "CPU avg 0.00%" and proposed
        ("busy", set(ECS_METRICS)),
        # CPU is idle, the network is not: read as 0, every day looked quiet
        ("net_busy", {"IntranetInRate", "IntranetOutRate", "InternetInRate", "InternetOutRate"}),
    ],
    ids=["busy-no-average-anywhere", "net-busy-no-network-average"],
)
def test_a_busy_machine_whose_datapoints_lack_average_is_not_proposed(
    harness: Harness, own_region: str, profile: str, metrics: set[str]
) -> None:
    iid = new_instance_id(own_region)
    harness.dc.admin.create_instance(
        iid, region=own_region, created_at=FLEET_NOW - 90 * DAY, profile=profile
    )
    reader = _rewriting_cms(harness.dc.reader(), _drop_average(metrics))
    # one worker: the factory's readers would not be wrapped
    report = harness.agent(regions=(own_region,), reader=reader, scan_workers=1).run_once()
    assert harness.proposals(resource_id=iid) == []
    assert report.by_verdict == {"insufficient": 1}
    assert sum(reader.dropped.values()) > 0
