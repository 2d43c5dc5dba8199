"""A seeded, deterministic fleet and its CloudMonitor metrics, computed on the fly.

``generate_fleet`` turns (seed, sizes, anchor time) into the same instances every time:
idle, busy, bursty, network-busy, protected, prod-tagged, young and already-stopped ECS
instances plus RDS instances, with names and tags full of HTML, quotes and non-ASCII
text. Each instance carries its ground-truth class (``truth``), which is what an idle
detector is expected to conclude — the agent's tests compare against it.

Metrics are never stored: ``datapoint`` derives an hourly (average, maximum) from
(seed, instance, metric, day) with its own PRNG, so a 10,000-instance fleet with months
of history seeds in well under a second and reads back identically in any process.

Ground truth, as the default idle policy (docs/architecture.md#staged-clean-up, issue 5) sees it:

=========  =====================================================================
idle       Running, ≥ 20 days old, no protect/prod tag, CPU 0.3–3 %, memory 3–12 %
           (or not reported), network 4 × 20–90 bit/s (< 4 MB/day in + out)
busy       CPU 25–85 %, memory 40–85 %, network 0.2–5 Mbit/s
bursty     CPU ~1 % with two hours a day at 35–55 % (p95 far above 10 %)
net_busy   CPU idle, network 0.1–1 Mbit/s (GBs a day)
protected  idle metrics, a protect tag (key or value ``airlock:protect``, any case)
prod       idle metrics, ``env``/``environment`` value starting with ``prod``
young      idle metrics, created 1–10 days ago
stopped    already Stopped, no metrics
=========  =====================================================================
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "ECS_CLASSES",
    "METRIC_KIND",
    "RDS_CLASSES",
    "InstanceSpec",
    "datapoint",
    "generate_fleet",
]

Kind = Literal["ecs", "rds"]

ECS_CLASSES: Final = (
    "idle",
    "busy",
    "bursty",
    "net_busy",
    "protected",
    "prod",
    "young",
    "stopped",
)
_ECS_WEIGHTS: Final = (30, 25, 10, 5, 8, 10, 7, 5)
RDS_CLASSES: Final = ("idle", "busy", "protected", "prod")
_RDS_WEIGHTS: Final = (40, 40, 10, 10)

#: vendor metric name → (namespace, kind, scale). ``kind`` picks the generator.
METRIC_KIND: Final[dict[tuple[str, str], tuple[str, float]]] = {
    ("acs_ecs_dashboard", "CPUUtilization"): ("cpu", 1.0),
    ("acs_ecs_dashboard", "memory_usedutilization"): ("mem", 1.0),
    ("acs_ecs_dashboard", "IntranetInRate"): ("net", 1.0),
    ("acs_ecs_dashboard", "IntranetOutRate"): ("net", 0.8),
    ("acs_ecs_dashboard", "InternetInRate"): ("net", 0.5),
    ("acs_ecs_dashboard", "InternetOutRate"): ("net", 0.4),
    ("acs_rds_dashboard", "CpuUsage"): ("cpu", 1.0),
    ("acs_rds_dashboard", "MemoryUsage"): ("mem", 1.0),
    ("acs_rds_dashboard", "MySQL_NetworkInNew"): ("net", 1.0),
    ("acs_rds_dashboard", "MySQL_NetworkOutNew"): ("net", 0.8),
}

_DAY: Final = 86_400
_HOUR: Final = 3_600
_ALNUM: Final = "0123456789abcdefghijklmnopqrstuvwxyz"

# Names and tag values an attacker or a careless colleague might set: markup, quotes,
# control-looking text, right-to-left and CJK scripts, emoji. All NFC.
_HOSTILE_NAMES: Final = (
    "<script>alert('xss')</script>",
    '"><img src=x onerror=alert(1)>',
    "O'Brien's \"test\" box",
    "数据库-测试-01",
    "serveur-café-é",
    "🚀 launch-pad",
    "مخدم-الاختبار",
    "web&amp;api <b>bold</b>",
    "back\\slash`tick`${x}",
    "Ünïcødé ñame — long dash",
)
_PLAIN_NAMES: Final = ("web", "api", "worker", "batch", "cache", "etl", "build", "jump")
_TEAMS: Final = ("payments", "<i>growth</i>", "数据平台", "sre", 'ml "research"', "données")
_NONPROD_ENVS: Final = ("dev", "staging", "test", "qa", "preprod", "sandbox")
_PROD_TAGS: Final = (
    ("env", "prod"),
    ("environment", "production"),
    ("Env", "Prod-EU"),
    ("ENVIRONMENT", "PRODUCTION"),
    ("env", "production-<blue>"),
)
_PROTECT_TAGS: Final = (
    ("airlock:protect", "true"),
    ("Airlock:Protect", ""),
    ("AIRLOCK:PROTECT", "yes"),
    ("note", "airlock:protect"),
)
_ECS_TYPES: Final = ("ecs.g7.large", "ecs.c7.xlarge", "ecs.t6-c1m1.large", "ecs.r7.2xlarge")
_RDS_CLASSES_T: Final = ("mysql.n2.medium.1", "rds.mysql.s3.large", "pg.n4.xlarge.2c")


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One seeded instance. ``profile`` drives its metrics; ``truth`` is its class."""

    id: str
    kind: Kind
    region: str
    name: str
    status: str
    instance_type: str
    created_at: int  # Unix seconds
    tags: tuple[tuple[str, str], ...]
    truth: str
    profile: str  # idle | busy | bursty | net_busy | none (no metrics)
    has_memory: bool


def _rand_id(rng: random.Random, prefix: str, length: int, taken: set[str]) -> str:
    while True:
        ident = prefix + "".join(rng.choice(_ALNUM) for _ in range(length))
        if ident not in taken:
            taken.add(ident)
            return ident


def _name(rng: random.Random, index: int) -> str:
    if rng.random() < 0.25:
        return f"{rng.choice(_HOSTILE_NAMES)} {index}"
    return f"{rng.choice(_PLAIN_NAMES)}-{index:05d}"


def _pick_class(
    rng: random.Random, index: int, classes: Sequence[str], weights: Sequence[int]
) -> str:
    # The first instances cover every class once, so even a tiny fleet has each of them.
    if index < len(classes):
        return classes[index]
    return rng.choices(classes, weights=weights)[0]


def generate_fleet(
    *,
    seed: int,
    instances: int,
    rds: int,
    now: int,
    regions: Sequence[str] = ("ap-southeast-1",),
) -> list[InstanceSpec]:
    """The same (seed, sizes, now, regions) always yields the same fleet."""
    if instances < 0 or rds < 0:
        raise ValueError("sizes must be non-negative")
    if not regions:
        raise ValueError("at least one region")
    # A reproducible fleet needs a seeded PRNG; nothing here is secret.
    rng = random.Random(f"devcloud-fleet:{seed}")  # noqa: S311
    taken: set[str] = set()
    fleet: list[InstanceSpec] = []
    for index in range(instances):
        truth = _pick_class(rng, index, ECS_CLASSES, _ECS_WEIGHTS)
        fleet.append(
            _ecs_spec(rng=rng, index=index, truth=truth, now=now, regions=regions, taken=taken)
        )
    for index in range(rds):
        truth = _pick_class(rng, index, RDS_CLASSES, _RDS_WEIGHTS)
        fleet.append(
            _rds_spec(rng=rng, index=index, truth=truth, now=now, regions=regions, taken=taken)
        )
    return fleet


def _common_tags(rng: random.Random, truth: str) -> list[tuple[str, str]]:
    tags = [("team", rng.choice(_TEAMS)), ("owner", rng.choice(("李雷", "zoë", "o'neil", "ana")))]
    if truth == "prod":
        tags.append(rng.choice(_PROD_TAGS))
    else:
        tags.append(("env", rng.choice(_NONPROD_ENVS)))
    if truth == "protected":
        tags.append(rng.choice(_PROTECT_TAGS))
    if rng.random() < 0.2:
        tags.append(("description", rng.choice(_HOSTILE_NAMES)))
    return tags


def _age(rng: random.Random, truth: str) -> int:
    if truth == "young":
        return rng.randint(1 * _DAY, 10 * _DAY)
    return rng.randint(20 * _DAY, 400 * _DAY)


def _ecs_spec(
    *, rng: random.Random, index: int, truth: str, now: int, regions: Sequence[str], taken: set[str]
) -> InstanceSpec:
    if truth == "stopped":
        profile = "none"  # a stopped machine reports no metrics
    else:
        profile = truth if truth in ("busy", "bursty", "net_busy") else "idle"
    return InstanceSpec(
        id=_rand_id(rng, "i-", 20, taken),
        kind="ecs",
        region=regions[index % len(regions)],
        name=_name(rng, index),
        status="Stopped" if truth == "stopped" else "Running",
        instance_type=rng.choice(_ECS_TYPES),
        created_at=now - _age(rng, truth),
        tags=tuple(_common_tags(rng, truth)),
        truth=truth,
        profile=profile,
        # Memory needs the CloudMonitor agent; a third of idle machines lack it.
        has_memory=not (profile == "idle" and rng.random() < 0.33),
    )


def _rds_spec(
    *, rng: random.Random, index: int, truth: str, now: int, regions: Sequence[str], taken: set[str]
) -> InstanceSpec:
    return InstanceSpec(
        id=_rand_id(rng, "rm-", 16, taken),
        kind="rds",
        region=regions[index % len(regions)],
        name=_name(rng, index),
        status="Running",
        instance_type=rng.choice(_RDS_CLASSES_T),
        created_at=now - _age(rng, truth),
        tags=tuple(_common_tags(rng, truth)),
        truth=truth,
        profile="busy" if truth == "busy" else "idle",
        has_memory=True,
    )


# --------------------------------------------------------------------------- metrics


@functools.lru_cache(maxsize=200_000)
def _day_series(
    seed: int, instance_id: str, profile: str, kind: str, day: int
) -> tuple[tuple[float, float], ...]:
    """24 hourly (average, maximum) pairs of one metric kind on one UTC day."""
    rng = random.Random(f"{seed}:{instance_id}:{kind}:{day}")  # noqa: S311 (reproducible)
    bursts = set(rng.sample(range(24), 2)) if profile == "bursty" and kind == "cpu" else set()
    out = []
    for hour in range(24):
        if kind == "cpu":
            if profile == "busy":
                avg = rng.uniform(25.0, 85.0)
            elif hour in bursts:
                avg = rng.uniform(35.0, 55.0)
            elif profile == "bursty":
                avg = rng.uniform(0.5, 1.5)
            else:
                avg = rng.uniform(0.3, 3.0)
        elif kind == "mem":
            avg = rng.uniform(40.0, 85.0) if profile == "busy" else rng.uniform(3.0, 12.0)
        elif profile == "busy":
            avg = rng.uniform(2e5, 5e6)
        elif profile == "net_busy":
            avg = rng.uniform(1e5, 1e6)
        else:
            avg = rng.uniform(20.0, 90.0)
        peak = avg * rng.uniform(1.1, 2.0)
        if kind in ("cpu", "mem"):
            peak = min(peak, 100.0)
        out.append((round(avg, 2), round(peak, 2)))
    return tuple(out)


def _hourly(
    seed: int, spec_id: str, profile: str, kind: str, hour_start: int
) -> tuple[float, float]:
    day, rem = divmod(hour_start, _DAY)
    return _day_series(seed, spec_id, profile, kind, day)[rem // _HOUR]


@functools.lru_cache(maxsize=200_000)
def _day_aggregate(
    seed: int, instance_id: str, profile: str, kind: str, day: int
) -> tuple[float, float]:
    """(mean of averages, max of maxima) of one UTC day: a daily query costs one lookup."""
    series = _day_series(seed, instance_id, profile, kind, day)
    return sum(a for a, _ in series) / 24, max(m for _, m in series)


def datapoint(
    *, seed: int, instance_id: str, profile: str, kind: str, scale: float, t: int, period: int
) -> tuple[float, float]:
    """(average, maximum) of the period starting at ``t`` (Unix seconds)."""
    if period <= _HOUR:
        avg, peak = _hourly(seed, instance_id, profile, kind, t - t % _HOUR)
    elif t % _DAY == 0 and period % _DAY == 0:
        days = [
            _day_aggregate(seed, instance_id, profile, kind, d)
            for d in range(t // _DAY, (t + period) // _DAY)
        ]
        avg = sum(a for a, _ in days) / len(days)
        peak = max(m for _, m in days)
    else:
        pairs = [
            _hourly(seed, instance_id, profile, kind, h)
            for h in range(t - t % _HOUR, t + period, _HOUR)
            if h < t + period
        ]
        avg = sum(p[0] for p in pairs) / len(pairs)
        peak = max(p[1] for p in pairs)
    if scale == 1.0 and period <= _HOUR:
        return avg, peak  # already rounded by _day_series; the hot path of a scan
    return round(avg * scale, 2), round(peak * scale, 2)
