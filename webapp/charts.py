"""Evidence charts: the agent's daily series turned into plain SVG geometry, server-side.

The template draws the SVG from a :class:`Chart` with class names only (no inline style:
the CSP forbids it), so the page needs no script to show the evidence. Series come from
the signed action's ``evidence`` and are attacker-influenced: anything that is not a
list of non-negative integers of a sane length is not drawn, never guessed at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from airlock.units import decimal_bytes

__all__ = ["Chart", "Point", "evidence_charts", "human_bytes", "series"]

WIDTH: Final = 560
HEIGHT: Final = 180
_LEFT: Final = 64  # room for the y labels
_RIGHT: Final = 12
_TOP: Final = 14
_BOTTOM: Final = 30  # room for the x labels
_MAX_POINTS: Final = 400


@dataclass(frozen=True, slots=True)
class Point:
    day: int  # 1-based day of the window
    x: float
    y: float
    label: str  # the value as a person reads it, for the tooltip and the table


@dataclass(frozen=True, slots=True)
class Chart:
    key: str  # "cpu" or "net": the CSS class suffix
    title: str
    description: str
    width: int
    height: int
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    points: tuple[Point, ...]
    #: One polyline per run of consecutive reported days; a missing day breaks the line.
    segments: tuple[str, ...]
    #: Days with nothing reported (the agent writes null), for the values list.
    missing: tuple[int, ...]
    y_max_label: str
    threshold_y: float | None
    threshold_label: str | None
    #: (x, text, text-anchor): the end labels are anchored inward so they are not clipped.
    x_labels: tuple[tuple[float, str, str], ...]


def series(evidence: Mapping[str, Any], key: str) -> list[int | None] | None:
    """The list under ``key`` if it is 1..400 non-negative integers or nulls (days with
    nothing reported) with at least one integer; otherwise None: not drawn at all."""
    value = evidence.get(key)
    if not isinstance(value, list) or not 0 < len(value) <= _MAX_POINTS:
        return None
    if not all(v is None or (type(v) is int and 0 <= v < 2**53) for v in value):
        return None
    if all(v is None for v in value):
        return None
    return value


def human_bytes(n: int) -> str:
    # Truncated, as the CLI and the agent's signed reason are (airlock.units).
    return decimal_bytes(n)


def percent(bp: int) -> str:
    return f"{bp / 100:.2f}%"


def _chart(
    key: str,
    *,
    title: str,
    description: str,
    values: list[int | None],
    fmt: Callable[[int], str],
    threshold: int | None,
) -> Chart:
    known = [v for v in values if v is not None]
    top = max([*known, threshold or 0, 1])
    # A little headroom so the highest point and the threshold line are not on the edge.
    scale_max = top * 1.15
    x0, x1 = _LEFT, WIDTH - _RIGHT
    y0, y1 = _TOP, HEIGHT - _BOTTOM
    step = (x1 - x0) / (len(values) - 1) if len(values) > 1 else 0.0

    def x_of(i: int) -> float:
        return round(x0 + i * step if len(values) > 1 else (x0 + x1) / 2, 2)

    def y_of(v: float) -> float:
        return round(y1 - (v / scale_max) * (y1 - y0), 2)

    points: list[Point] = []
    segments: list[str] = []
    run: list[Point] = []
    for i, v in enumerate(values):
        if v is None:
            if run:
                segments.append(" ".join(f"{p.x},{p.y}" for p in run))
                run = []
            continue
        point = Point(i + 1, x_of(i), y_of(v), fmt(v))
        points.append(point)
        run.append(point)
    if run:
        segments.append(" ".join(f"{p.x},{p.y}" for p in run))
    ticks = sorted({0, len(values) // 2, len(values) - 1})
    return Chart(
        key=key,
        title=title,
        description=description,
        width=WIDTH,
        height=HEIGHT,
        plot_left=x0,
        plot_right=x1,
        plot_top=y0,
        plot_bottom=y1,
        points=tuple(points),
        segments=tuple(segments),
        missing=tuple(i + 1 for i, v in enumerate(values) if v is None),
        y_max_label=fmt(round(scale_max)),
        threshold_y=y_of(threshold) if threshold is not None else None,
        threshold_label=f"threshold {fmt(threshold)}" if threshold is not None else None,
        x_labels=tuple((x_of(i), f"day {i + 1}", _anchor(i, len(values))) for i in ticks),
    )


def _anchor(i: int, n: int) -> str:
    if n > 1 and i == 0:
        return "start"
    if n > 1 and i == n - 1:
        return "end"
    return "middle"


def _threshold(evidence: Mapping[str, Any], key: str) -> int | None:
    # The agent records the bar it applied under evidence.thresholds (services/agent/idle.py).
    thresholds = evidence.get("thresholds")
    value = thresholds.get(key) if isinstance(thresholds, Mapping) else None
    return value if type(value) is int and 0 <= value < 2**53 else None


def _span(values: list[int | None], fmt: Callable[[int], str]) -> str:
    known = [v for v in values if v is not None]
    gaps = len(values) - len(known)
    text = f"from {fmt(min(known))} to {fmt(max(known))}"
    if gaps:
        text += f"; {gaps} {'day' if gaps == 1 else 'days'} without data"
    return text


def evidence_charts(evidence: Mapping[str, Any]) -> list[Chart]:
    """The CPU and network charts the evidence supports (none, one or both)."""
    charts: list[Chart] = []
    cpu = series(evidence, "daily_cpu_p95_bp")
    if cpu is not None:
        charts.append(
            _chart(
                "cpu",
                title="CPU, daily 95th percentile",
                description=f"CPU p95 per day over {len(cpu)} days, {_span(cpu, percent)}",
                values=cpu,
                fmt=percent,
                threshold=_threshold(evidence, "cpu_p95_max_bp"),
            )
        )
    net = series(evidence, "daily_net_bytes")
    if net is not None:
        charts.append(
            _chart(
                "net",
                title="Network traffic per day",
                description=f"Network bytes per day over {len(net)} days, "
                f"{_span(net, human_bytes)}",
                values=net,
                fmt=human_bytes,
                threshold=_threshold(evidence, "net_quiet_bytes_per_day"),
            )
        )
    return charts
