"""Numbers shown to people, formatted one way everywhere (the CLI, the web app).

Integer arithmetic only, truncated like the agent's own reason text
(``services.agent.idle.format_bytes``), so a figure in the evidence never reads
higher than the same figure in the signed reason beside it.
"""

from __future__ import annotations

__all__ = ["decimal_bytes", "duration", "money", "span"]

_UNITS = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def decimal_bytes(n: int) -> str:
    """``1_571_315`` → ``"1.5 MB"``: decimal units, one place, truncated; under 1 kB in B."""
    if n < 0:
        raise ValueError("a byte count is not negative")
    for unit, size in _UNITS:
        if n >= size:
            return f"{n // size}.{n % size * 10 // size} {unit}"
    return f"{n} B"


_SPANS = (("day", 86_400), ("hour", 3_600), ("minute", 60))


def span(seconds: int) -> str:
    """``604_800`` → ``"7 days"``, ``90`` → ``"1 minute"``: the largest whole unit,
    truncated (a grace period shown as "7 days" is never less than seven days)."""
    if seconds < 0:
        raise ValueError("a duration is not negative")
    for unit, size in _SPANS:
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}" if n == 1 else f"{n} {unit}s"
    return "1 second" if seconds == 1 else f"{seconds} seconds"


def duration(seconds: int) -> str:
    """``3 d 4 h``, ``5 h 12 min``, ``42 min``, ``30 s``: two units at most, truncated;
    negative → ``0 s``. For a figure in a table or beside a label."""
    seconds = max(0, seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min"
    return f"{secs} s"


def money(minor: int, currency: str, exponent: int) -> str:
    """``(823449, "USD", 2)`` → ``"USD 8,234.49"``: minor units, exactly, no float."""
    sign = "-" if minor < 0 else ""
    units, cents = divmod(abs(minor), 10**exponent)
    fraction = f".{cents:0{exponent}d}" if exponent else ""
    return f"{currency} {sign}{units:,}{fraction}"
