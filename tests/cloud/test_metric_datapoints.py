"""A CloudMonitor datapoint without a usable number is dropped, never read as zero.

A missing ``Average`` read as 0.0 made a busy machine look idle ("CPU avg 0.00%"). The
reader now drops any datapoint whose value, timestamp or instance id it cannot establish,
counts and logs the drop, and leaves the verdict to the idle policy, which calls too few
samples ``insufficient``. These tests answer the real adapter with a simulated
CloudMonitor client (the SDK seam), so each malformed shape is exact.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader
from airlock.cloud.ports import MetricPoint, UnknownOutcome

T0 = 1_795_000_000 - 1_795_000_000 % 86_400
IID = "i-abcd1234"
GOOD: dict[str, Any] = {"timestamp": T0 * 1000, "instanceId": IID, "Average": 97.5, "Maximum": 99.0}


def _reader(datapoints: object) -> AlibabaReader:
    """The real reader, its CloudMonitor client replaced by one that answers ``datapoints``
    (a JSON text as the API sends it, or a list to be encoded)."""
    text = (
        datapoints if isinstance(datapoints, str) or datapoints is None else json.dumps(datapoints)
    )
    body = SimpleNamespace(
        success=True, code="200", message="", request_id="R1", next_token=None, datapoints=text
    )
    cms = SimpleNamespace(
        describe_metric_list_with_options=lambda req, rt: SimpleNamespace(body=body)
    )
    reader = AlibabaReader(
        AlibabaConfig("LTAItest", "secret", endpoint="127.0.0.1:1", protocol="http")
    )
    reader._clients.get = lambda product, region: cms  # type: ignore[method-assign]
    return reader


def _read(reader: AlibabaReader, ids: tuple[str, ...] = (IID,)) -> list[tuple[str, MetricPoint]]:
    return list(
        reader.get_metrics_many(
            "ap-southeast-1", ids, "CPUUtilization", start=T0, end=T0 + 86_400, period=3600
        )
    )


def _with(**fields: Any) -> dict[str, Any]:
    point = dict(GOOD)
    for key, value in fields.items():
        if value is _ABSENT:
            point.pop(key, None)
        else:
            point[key] = value
    return point


_ABSENT = object()


@pytest.mark.parametrize(
    ("point", "field"),
    [
        # the reviewer's case: only Minimum/Maximum/Sum, no Average and no Value
        (
            {
                "timestamp": T0 * 1000,
                "instanceId": IID,
                "Minimum": 80.0,
                "Maximum": 97.0,
                "Sum": 5000,
            },
            "Average",
        ),
        (_with(Average=None), "Average"),
        (_with(Average="97.5"), "Average"),
        (_with(Average=True), "Average"),
        (_with(Average=[97.5]), "Average"),
        (_with(Average=_ABSENT, Value=None), "Average"),
        (_with(Maximum=None), "Maximum"),
        (_with(timestamp=_ABSENT), "timestamp"),
        (_with(timestamp=None), "timestamp"),
        (_with(timestamp=str(T0 * 1000)), "timestamp"),
        (_with(timestamp=T0 * 1000.0), "timestamp"),
        (_with(timestamp=True), "timestamp"),
        (_with(instanceId=_ABSENT), "instanceId"),
        (_with(instanceId=7), "instanceId"),
        (_with(instanceId="i-someoneelse"), "instanceId"),
        ("not an object", "datapoint"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 12 else None,
)
def test_a_datapoint_without_a_usable_field_is_dropped_not_defaulted(
    point: object, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    reader = _reader([point, GOOD])
    with caplog.at_level(logging.WARNING, logger="airlock.cloud"):
        got = _read(reader)
    # the good point beside it is still read; the bad one is neither a 0 nor an error
    assert got == [(IID, MetricPoint(timestamp=T0, average=97.5, maximum=99.0))]
    assert reader.dropped == {f"CPUUtilization:{field}": 1}
    assert f"no usable {field}" in caplog.text


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "1" + "0" * 400])
def test_a_non_finite_average_is_dropped(literal: str) -> None:
    # json.loads admits NaN/Infinity, turns 1e400 into inf and 10**400 into an int no float
    # holds; none of them is a reading
    text = f'[{{"timestamp": {T0 * 1000}, "instanceId": "{IID}", "Average": {literal}}}]'
    reader = _reader(text)
    assert _read(reader) == []
    assert reader.dropped == {"CPUUtilization:Average": 1}


def test_value_stands_in_for_a_missing_average_and_maximum_defaults_to_it() -> None:
    point = {"timestamp": T0 * 1000, "instanceId": IID, "Value": 3}
    assert _read(_reader([point])) == [(IID, MetricPoint(timestamp=T0, average=3.0, maximum=3.0))]


def test_points_outside_the_window_are_skipped_not_counted_as_dropped() -> None:
    reader = _reader([_with(timestamp=(T0 + 86_400) * 1000), GOOD])
    assert len(_read(reader)) == 1
    assert reader.dropped == {}


@pytest.mark.parametrize("text", ["{not json", '{"timestamp": 1}', "42"])
def test_a_datapoints_page_that_is_not_a_json_array_is_an_unknown_outcome(text: str) -> None:
    # a CloudError, so discovery retries the read and then calls the batch insufficient
    with pytest.raises(UnknownOutcome) as caught:
        _read(_reader(text))
    assert caught.value.code == "MalformedResponse"


def test_an_empty_datapoints_page_is_no_points() -> None:
    assert _read(_reader(None)) == []
    assert _read(_reader("")) == []
