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


@pytest.mark.parametrize(
    ("kind", "resource_type", "bad_id"),
    [("ecs", "ecs.instance", "i-Bad0003"), ("rds", "rds.instance", "rm-Bad0003")],
)
def test_an_id_not_in_the_provider_format_is_never_proposed_and_spoils_no_batch(
    harness: Harness, own_region: str, kind: str, resource_type: str, bad_id: str
) -> None:
    """One odd id used to raise ValueError out of the batched metric query and end the
    whole scan; now it is ``insufficient`` with a reason and its neighbours are proposed."""
    prefix = bad_id.split("-", maxsplit=1)[0]
    good = [f"{prefix}-{own_region.replace('-', '')}{n:04d}" for n in (1, 2)]
    for rid in (*good, bad_id):
        harness.dc.admin.create_instance(
            rid, kind=kind, region=own_region, created_at=FLEET_NOW - 90 * DAY, profile="idle"
        )
    agent = harness.agent(regions=(own_region,))
    verdicts = {o.state.resource_id: o.verdict for o in agent.discovery.scan(harness.now)}
    assert verdicts[bad_id].kind == "insufficient"
    assert verdicts[bad_id].reasons == (
        f"resource id {bad_id!r} is not a valid {resource_type} id",
    )
    assert {verdicts[rid].kind for rid in good} == {"idle"}

    report = agent.run_once()
    assert report.complete and report.by_verdict == {"idle": 2, "insufficient": 1}
    assert {p["resource_id"] for p in harness.proposals() if p["region"] == own_region} == set(good)


class _FailingFirst:
    """A reader whose first listing raises ``exc`` (a bug, or data nobody foresaw)."""

    def __init__(self, reader: AlibabaReader, exc: BaseException) -> None:
        self._reader = reader
        self._exc: BaseException | None = exc

    def list_instances(self, *args: Any, **kwargs: Any) -> Any:
        if self._exc is not None:
            exc, self._exc = self._exc, None
            raise exc
        return self._reader.list_instances(*args, **kwargs)

    def get_state(self, *args: Any, **kwargs: Any) -> Any:
        return self._reader.get_state(*args, **kwargs)

    def get_metrics(self, *args: Any, **kwargs: Any) -> Any:
        return self._reader.get_metrics(*args, **kwargs)


def test_a_malformed_id_cannot_forge_a_line_in_the_agent_log_used_as_a_library(
    harness: Harness, own_region: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent's warning about an id it will not query quotes the id: escaped by the
    agent itself, not only by the CLI's log formatter (airlock.text)."""
    bad_id = "i-Bad\r\n2026-12-01 INFO forged\x1b[2J\u009b\u202e"
    harness.dc.admin.create_instance(
        bad_id, region=own_region, created_at=FLEET_NOW - 90 * DAY, profile="idle"
    )
    with caplog.at_level("WARNING", logger="airlock.agent"):
        outcomes = list(harness.agent(regions=(own_region,)).discovery.scan(harness.now))
    assert [o.verdict.kind for o in outcomes] == ["insufficient"]
    [message] = [r.getMessage() for r in caplog.records if "i-Bad" in r.getMessage()]
    assert message.isprintable(), message
    assert "i-Bad\\u000d\\u000a2026-12-01 INFO forged\\u001b[2J\\u009b\\u202e" in message


def test_the_loop_survives_an_unexpected_error_and_runs_the_next_scan(
    harness: Harness, own_region: str, caplog: pytest.LogCaptureFixture
) -> None:
    import threading

    reader = _FailingFirst(harness.dc.reader(), KeyError("timestamp"))
    agent = harness.agent(regions=(own_region,), reader=reader, scan_workers=1)
    stop = threading.Event()
    errors: list[Exception] = []
    reports: list[object] = []

    def on_report(report: object) -> None:
        reports.append(report)
        stop.set()

    with caplog.at_level("ERROR", logger="airlock.agent"):
        agent.run_loop(interval=0, stop=stop, on_report=on_report, on_error=errors.append)
    assert [type(e) for e in errors] == [KeyError]
    assert len(reports) == 1  # the next pass ran on schedule and completed
    [record] = [r for r in caplog.records if r.name == "airlock.agent"]
    assert record.exc_info is not None and record.exc_info[0] is KeyError  # with traceback


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)])
def test_the_loop_never_swallows_interrupt_or_exit(
    harness: Harness, own_region: str, exc: BaseException
) -> None:
    import threading

    agent = harness.agent(
        regions=(own_region,), reader=_FailingFirst(harness.dc.reader(), exc), scan_workers=1
    )
    errors: list[Exception] = []
    with pytest.raises(type(exc)):
        agent.run_loop(interval=0, stop=threading.Event(), on_error=errors.append)
    assert errors == []
