"""The idle policy (``idle/v1``): integer usage over a window, and the verdict on it.

CloudMonitor reports percentages and bit/s rates as floats. :func:`percent_to_bp` and
:func:`rate_to_bytes` are the one place where a float becomes an integer (basis points,
bytes), rounding half up on the decimal the API printed; everything after them —
aggregates, thresholds, evidence — is integer arithmetic, because evidence goes into a
signed action that refuses floats (docs/protocol.md#strict-json).

Thresholds are strict (``cpu_avg < 5 %`` is ``cpu_avg_bp < 500``). Anything the policy
cannot establish (too few samples, no network data, unknown creation time) is never idle:
the verdict is ``insufficient``, which no caller treats as either idle or busy.

This module is pure: no clock reads, no I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Final, Literal

from airlock.cloud.tags import ProductionTags

__all__ = [
    "DAY",
    "IdlePolicy",
    "Usage",
    "UsageAccumulator",
    "Verdict",
    "VerdictKind",
    "Window",
    "format_bp",
    "format_bytes",
    "parse_rfc3339",
    "percent_to_bp",
    "rate_to_bytes",
    "rfc3339",
]

DAY: Final = 86_400
HOUR: Final = 3_600
POLICY_NAME: Final = "idle/v1"

VerdictKind = Literal["idle", "busy", "insufficient", "protected", "young", "not_running"]


# --------------------------------------------------------------------------- units


@functools.lru_cache(maxsize=65_536)
def percent_to_bp(value: float) -> int:
    """A percentage as integer basis points (1 % = 100 bp), rounded half up.

    ``repr`` gives the shortest decimal that round-trips, i.e. what the API sent
    (``1.005`` stays 1.005 and becomes 101 bp, where ``1.005 * 100`` would give 100.49…).
    Cached: CloudMonitor prints two decimals, so a fleet has few distinct values.
    """
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"not a usable percentage: {value!r}")
    return int((Decimal(repr(value)) * 100).to_integral_value(ROUND_HALF_UP))


def rate_to_bytes(bits_per_second: float, period: int) -> int:
    """Bytes moved by an average rate of ``bits_per_second`` over ``period`` seconds."""
    if not math.isfinite(bits_per_second) or bits_per_second < 0:
        raise ValueError(f"not a usable rate: {bits_per_second!r}")
    exact = Decimal(repr(bits_per_second)) * period / 8
    return int(exact.to_integral_value(ROUND_HALF_UP))


def format_bp(bp: int) -> str:
    """``340`` → ``"3.40%"`` (integer arithmetic only)."""
    return f"{bp // 100}.{bp % 100:02d}%"


def format_bytes(n: int) -> str:
    """``2_100_000`` → ``"2.1 MB"`` (decimal megabytes, truncated to one place)."""
    return f"{n // 1_000_000}.{n % 1_000_000 // 100_000} MB"


def rfc3339(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> int | None:
    try:
        return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except ValueError:
        return None


# --------------------------------------------------------------------------- window


@dataclass(frozen=True, slots=True)
class Window:
    """The last ``days`` whole UTC days before ``now``: ``[start, end)``, day-aligned.

    Day alignment makes CloudMonitor's daily points (period 86400) line up with the
    daily series in the evidence, and makes the window — hence the proposal id — the
    same for every scan on one UTC day.
    """

    start: int
    end: int
    days: int

    @classmethod
    def ending_before(cls, now: int, days: int) -> Window:
        if days < 1:
            raise ValueError("a window has at least one day")
        end = now - now % DAY
        return cls(start=end - days * DAY, end=end, days=days)

    @property
    def hours(self) -> int:
        return self.days * 24

    @property
    def start_day(self) -> str:
        return rfc3339(self.start)[:10]

    def day_index(self, ts: int) -> int | None:
        if self.start <= ts < self.end:
            return (ts - self.start) // DAY
        return None


# --------------------------------------------------------------------------- usage


def _p95(values: list[int]) -> int:
    """Nearest-rank 95th percentile of a non-empty list (sorts it in place)."""
    values.sort()
    rank = (95 * len(values) + 99) // 100  # ceil(0.95 n), in integers
    return values[rank - 1]


def _mean(total: int, n: int) -> int:
    return (2 * total + n) // (2 * n)  # round half up


@dataclass(frozen=True, slots=True)
class Usage:
    """One instance's usage over a window, in integers. ``None`` = not reported."""

    samples: int
    samples_expected: int
    cpu_avg_bp: int | None
    cpu_p95_bp: int | None
    daily_cpu_p95_bp: tuple[int | None, ...]
    mem_avg_bp: int | None
    daily_net_bytes: tuple[int | None, ...]
    #: Whether memory and network were read at all (the CPU stage may stop before).
    complete: bool

    @property
    def net_bytes_per_day(self) -> int | None:
        days = [d for d in self.daily_net_bytes if d is not None]
        return _mean(sum(days), len(days)) if days else None


class UsageAccumulator:
    """Folds datapoints of one instance into per-day integer buckets (bounded: one window).

    CPU is hourly (the p95 needs hours); memory and network may be daily points
    (CloudMonitor averages the rate over the period, so a daily point times 86400 / 8
    is the day's bytes).
    """

    __slots__ = ("_cpu_days", "_mem_n", "_mem_total", "_net_days", "window")

    def __init__(self, window: Window) -> None:
        self.window = window
        self._cpu_days: list[list[int]] = [[] for _ in range(window.days)]
        self._mem_total = 0
        self._mem_n = 0
        self._net_days: list[int | None] = [None] * window.days

    def add_cpu(self, ts: int, bp: int) -> None:
        day = self.window.day_index(ts)
        if day is not None:
            self._cpu_days[day].append(bp)

    def add_mem(self, ts: int, bp: int) -> None:
        if self.window.day_index(ts) is not None:
            self._mem_total += bp
            self._mem_n += 1

    def add_net(self, ts: int, nbytes: int) -> None:
        day = self.window.day_index(ts)
        if day is not None:
            self._net_days[day] = (self._net_days[day] or 0) + nbytes

    def usage(self, *, complete: bool) -> Usage:
        every = [bp for day in self._cpu_days for bp in day]
        daily = tuple(_p95(list(day)) if day else None for day in self._cpu_days)
        return Usage(
            samples=len(every),
            samples_expected=self.window.hours,
            cpu_avg_bp=_mean(sum(every), len(every)) if every else None,
            cpu_p95_bp=_p95(every) if every else None,
            daily_cpu_p95_bp=daily,
            mem_avg_bp=_mean(self._mem_total, self._mem_n) if self._mem_n else None,
            daily_net_bytes=tuple(self._net_days),
            complete=complete,
        )


# --------------------------------------------------------------------------- verdict


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: VerdictKind
    #: Why it is not idle (one line per failed criterion), or the idle summary.
    reasons: tuple[str, ...]

    @property
    def idle(self) -> bool:
        return self.kind == "idle"


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """The thresholds of ``idle/v1``; integers in the action's units.

    Units as in docs/protocol.md#strict-json: basis points, bytes, seconds.
    """

    window_days: int = 14
    min_samples_bp: int = 9000
    cpu_avg_max_bp: int = 500
    cpu_p95_max_bp: int = 1000
    mem_avg_max_bp: int = 1500
    net_quiet_bytes_per_day: int = 5_000_000
    net_quiet_min_days: int = 12
    protect_tags: tuple[str, ...] = ("airlock:protect",)
    prod_tag_keys: tuple[str, ...] = ("env", "environment")
    prod_value_prefix: str = "prod"

    def __post_init__(self) -> None:
        if self.net_quiet_min_days > self.window_days:
            raise ValueError("net_quiet_min_days cannot exceed window_days")
        if not self.protect_tags:
            # An empty protect list would silently make every resource fair game.
            raise ValueError("the protect list must name at least one tag")

    @property
    def thresholds(self) -> dict[str, int]:
        """What the evidence records, so a reviewer sees the bar the agent applied."""
        return {
            "min_samples_bp": self.min_samples_bp,
            "cpu_avg_max_bp": self.cpu_avg_max_bp,
            "cpu_p95_max_bp": self.cpu_p95_max_bp,
            "mem_avg_max_bp": self.mem_avg_max_bp,
            "net_quiet_bytes_per_day": self.net_quiet_bytes_per_day,
            "net_quiet_min_days": self.net_quiet_min_days,
        }

    def min_samples(self, window: Window) -> int:
        return (window.hours * self.min_samples_bp + 9_999) // 10_000

    # -- tags and age: decided before any metric is read

    def protection(self, tags: Mapping[str, str]) -> str | None:
        """Why the tags protect the resource, or None. Case-insensitive."""
        protect = {p.casefold() for p in self.protect_tags}
        for key, value in tags.items():
            if key.casefold() in protect:
                return f"protected: tag key {key}"
            if value.casefold() in protect:
                return f"protected: tag {key}={value}"
        production = ProductionTags(self.prod_tag_keys, self.prod_value_prefix).match(tags)
        if production is not None:
            return f"production: tag {production[0]}={production[1]}"
        return None

    def age_verdict(self, created_at: str, now: int) -> Verdict | None:
        created = parse_rfc3339(created_at)
        if created is None:
            return Verdict("insufficient", ("creation time unknown",))
        age = now - created
        if age < self.window_days * DAY:
            return Verdict(
                "young", (f"{age // DAY} days old, under the {self.window_days}-day window",)
            )
        return None

    # -- metrics

    def daily_cpu_verdict(self, daily_avg_bp: list[int]) -> Verdict | None:
        """Busy from daily CPU averages alone (the window average is their mean), or None.

        Only ever rules an instance *out*: idle still needs the hourly samples and p95.
        """
        if not daily_avg_bp:
            return None
        avg = _mean(sum(daily_avg_bp), len(daily_avg_bp))
        if avg >= self.cpu_avg_max_bp:
            return Verdict(
                "busy", (f"CPU avg {format_bp(avg)} ≥ {format_bp(self.cpu_avg_max_bp)} (daily)",)
            )
        return None

    def cpu_verdict(self, usage: Usage, window: Window) -> Verdict | None:
        """The CPU stage: None when CPU alone does not rule the instance out."""
        need = self.min_samples(window)
        if usage.samples < need or usage.cpu_avg_bp is None or usage.cpu_p95_bp is None:
            return Verdict(
                "insufficient",
                (f"{usage.samples} of {usage.samples_expected} hourly CPU samples, need {need}",),
            )
        busy = []
        if usage.cpu_avg_bp >= self.cpu_avg_max_bp:
            busy.append(f"CPU avg {format_bp(usage.cpu_avg_bp)} ≥ {format_bp(self.cpu_avg_max_bp)}")
        if usage.cpu_p95_bp >= self.cpu_p95_max_bp:
            busy.append(f"CPU p95 {format_bp(usage.cpu_p95_bp)} ≥ {format_bp(self.cpu_p95_max_bp)}")
        return Verdict("busy", tuple(busy)) if busy else None

    def verdict(self, usage: Usage, window: Window) -> Verdict:
        """The whole policy over a complete usage record."""
        cpu = self.cpu_verdict(usage, window)
        if cpu is not None:
            return cpu
        if not usage.complete:
            raise ValueError("memory and network were not read")
        busy: list[str] = []
        if usage.mem_avg_bp is not None and usage.mem_avg_bp >= self.mem_avg_max_bp:
            busy.append(
                f"memory avg {format_bp(usage.mem_avg_bp)} ≥ {format_bp(self.mem_avg_max_bp)}"
            )
        quiet, loud, missing = self._net_days(usage)
        if quiet < self.net_quiet_min_days:
            allowed_loud = window.days - self.net_quiet_min_days
            if loud > allowed_loud:
                busy.append(
                    f"network ≥ {format_bytes(self.net_quiet_bytes_per_day)}/day on {loud} of "
                    f"{window.days} days"
                )
            elif not busy:
                return Verdict(
                    "insufficient", (f"network not reported on {missing} of {window.days} days",)
                )
        if busy:
            return Verdict("busy", tuple(busy))
        return Verdict("idle", (self.describe_idle(usage, window),))

    def _net_days(self, usage: Usage) -> tuple[int, int, int]:
        quiet = loud = missing = 0
        for day in usage.daily_net_bytes:
            if day is None:
                missing += 1
            elif day < self.net_quiet_bytes_per_day:
                quiet += 1
            else:
                loud += 1
        return quiet, loud, missing

    def quiet_days(self, usage: Usage) -> int:
        return self._net_days(usage)[0]

    def describe_idle(self, usage: Usage, window: Window) -> str:
        if usage.cpu_avg_bp is None or usage.cpu_p95_bp is None:
            raise ValueError("no CPU aggregates to describe")
        memory = (
            f"memory {format_bp(usage.mem_avg_bp)} < {format_bp(self.mem_avg_max_bp)}"
            if usage.mem_avg_bp is not None
            else "memory not reported"
        )
        per_day = usage.net_bytes_per_day or 0
        return (
            f"Idle {window.days} days: CPU avg {format_bp(usage.cpu_avg_bp)} < "
            f"{format_bp(self.cpu_avg_max_bp)}, p95 {format_bp(usage.cpu_p95_bp)} < "
            f"{format_bp(self.cpu_p95_max_bp)}, {memory}, network {format_bytes(per_day)}/day "
            f"(quiet {self.quiet_days(usage)} of {window.days} days)"
        )
