"""The seeded fleet is deterministic, well formed, and its ground truth is what it claims."""

from __future__ import annotations

import statistics
import unicodedata

import pytest

from airlock.protocol import Resource
from devstack.devcloud import DevcloudHandle
from services.devcloud.fleet import (
    ECS_CLASSES,
    RDS_CLASSES,
    InstanceSpec,
    datapoint,
    generate_fleet,
)

from .conftest import FLEET_ECS, FLEET_NOW, FLEET_RDS, FLEET_SEED

NOW = 1_790_000_000
DAY = 86_400


def _fleet(seed: int = 5, n: int = 400, rds: int = 40) -> list[InstanceSpec]:
    return generate_fleet(
        seed=seed, instances=n, rds=rds, now=NOW, regions=("ap-southeast-1", "cn-hangzhou")
    )


def test_same_seed_same_fleet() -> None:
    assert _fleet(5) == _fleet(5)


def test_other_seed_other_fleet() -> None:
    assert {s.id for s in _fleet(5)}.isdisjoint({s.id for s in _fleet(6)})


def test_every_class_is_present_even_in_a_tiny_fleet() -> None:
    tiny = generate_fleet(seed=1, instances=len(ECS_CLASSES), rds=len(RDS_CLASSES), now=NOW)
    assert [s.truth for s in tiny if s.kind == "ecs"] == list(ECS_CLASSES)
    assert [s.truth for s in tiny if s.kind == "rds"] == list(RDS_CLASSES)


def test_ids_are_unique_and_in_the_kernels_format() -> None:
    fleet = _fleet()
    assert len({s.id for s in fleet}) == len(fleet)
    for spec in fleet:
        Resource(type="ecs.instance" if spec.kind == "ecs" else "rds.instance", id=spec.id)


def test_text_is_nfc_and_includes_markup_and_non_ascii() -> None:
    texts = [s.name for s in _fleet()] + [v for s in _fleet() for kv in s.tags for v in kv]
    assert all(unicodedata.is_normalized("NFC", t) for t in texts)
    assert any("<script>" in t for t in texts)
    assert any('"' in t for t in texts) and any("'" in t for t in texts)
    assert any(not t.isascii() for t in texts)


def _tags_lower(spec: InstanceSpec) -> list[tuple[str, str]]:
    return [(k.lower(), v.lower()) for k, v in spec.tags]


def test_protected_and_prod_classes_carry_their_tags() -> None:
    for spec in _fleet():
        tags = _tags_lower(spec)
        protected = any("airlock:protect" in (k, v) for k, v in tags)
        prod = any(k in ("env", "environment") and v.startswith("prod") for k, v in tags)
        assert protected == (spec.truth == "protected"), spec
        assert prod == (spec.truth == "prod"), spec


def test_young_instances_are_younger_than_the_window() -> None:
    for spec in _fleet():
        assert (NOW - spec.created_at < 14 * DAY) == (spec.truth == "young")


def _series(spec: InstanceSpec, kind: str, scale: float = 1.0) -> list[float]:
    return [
        datapoint(
            seed=5,
            instance_id=spec.id,
            profile=spec.profile,
            kind=kind,
            scale=scale,
            t=t,
            period=3600,
        )[0]
        for t in range(NOW - NOW % 3600 - 14 * DAY, NOW - NOW % 3600, 3600)
    ]


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


@pytest.mark.parametrize("truth", ["idle", "busy", "bursty", "net_busy"])
def test_ground_truth_matches_the_default_idle_thresholds(truth: str) -> None:
    """Idle: CPU avg < 5 %, p95 < 10 %, memory < 15 %, network (4 rates) < 5 MB/day."""
    specs = [s for s in _fleet() if s.kind == "ecs" and s.truth == truth][:8]
    assert specs
    for spec in specs:
        cpu = _series(spec, "cpu")
        mem = _series(spec, "mem")
        # four ECS rates (bit/s) scaled as devcloud serves them; bytes/day = sum * 3600 / 8
        net = [
            sum(v)
            for v in zip(*(_series(spec, "net", s) for s in (1.0, 0.8, 0.5, 0.4)), strict=True)
        ]
        net_days = [sum(net[d * 24 : d * 24 + 24]) * 3600 / 8 for d in range(14)]
        idle = (
            statistics.fmean(cpu) < 5
            and _p95(cpu) < 10
            and statistics.fmean(mem) < 15
            and sum(b < 5_000_000 for b in net_days) >= 12
        )
        assert idle == (truth == "idle"), (spec.id, truth)


def test_metrics_are_a_pure_function_of_their_inputs() -> None:
    spec = _fleet()[0]
    assert _series(spec, "cpu") == _series(spec, "cpu")
    day = datapoint(
        seed=5,
        instance_id=spec.id,
        profile="idle",
        kind="cpu",
        scale=1.0,
        t=NOW - NOW % DAY,
        period=DAY,
    )
    hours = [
        datapoint(
            seed=5,
            instance_id=spec.id,
            profile="idle",
            kind="cpu",
            scale=1.0,
            t=NOW - NOW % DAY + h * 3600,
            period=3600,
        )
        for h in range(24)
    ]
    assert day[0] == pytest.approx(statistics.fmean(a for a, _ in hours), abs=0.01)
    assert day[1] == max(m for _, m in hours)


def test_served_ground_truth_matches_the_generator(devcloud: DevcloudHandle) -> None:
    expected = {
        s.id: s.truth
        for s in generate_fleet(seed=FLEET_SEED, instances=FLEET_ECS, rds=FLEET_RDS, now=FLEET_NOW)
    }
    served = devcloud.admin.truth()
    assert {k: v for k, v in served.items() if k in expected} == expected


def test_admin_reseed_is_deterministic(tmp_path: object) -> None:
    from pathlib import Path

    from devstack.devcloud import running_devcloud

    assert isinstance(tmp_path, Path)
    with running_devcloud(tmp_path) as dc:
        dc.admin.seed(seed=9, instances=30, rds=3, now=NOW)
        first = sorted(
            (s.resource_id, s.name) for s in dc.reader().list_instances(dc.region, "ecs.instance")
        )
        dc.admin.seed(seed=9, instances=30, rds=3, now=NOW)
        again = sorted(
            (s.resource_id, s.name) for s in dc.reader().list_instances(dc.region, "ecs.instance")
        )
    assert first == again and len(first) == 30


def test_demo_names_change_names_and_tag_text_only_and_keep_every_class() -> None:
    from services.devcloud import demo_names

    fleet = generate_fleet(seed=1, instances=400, rds=40, now=NOW)
    demo = demo_names(fleet)
    assert demo == demo_names(fleet)  # deterministic
    for before, after in zip(fleet, demo, strict=True):
        assert (after.id, after.truth, after.profile, after.status) == (
            before.id,
            before.truth,
            before.profile,
            before.status,
        )
        assert [k for k, _ in after.tags] == [k for k, _ in before.tags]
        assert not any(ch in after.name for ch in "<>\"&'`$\\"), after.name
        assert not any(ch in v for _, v in after.tags for ch in '<>"&`$\\'), after.tags
        # The tags that make a class keep their meaning (the agent reads them).
        for (key, old), (_, new) in zip(before.tags, after.tags, strict=True):
            if "airlock:protect" in (key.lower(), old.lower()):
                assert new == old
            if key.lower() in ("env", "environment"):
                assert new.lower().startswith("prod") == old.lower().startswith("prod")
