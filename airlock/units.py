"""Numbers shown to people, formatted one way everywhere (the CLI, the web app).

Integer arithmetic only, truncated like the agent's own reason text
(``services.agent.idle.format_bytes``), so a figure in the evidence never reads
higher than the same figure in the signed reason beside it.
"""

from __future__ import annotations

__all__ = ["decimal_bytes"]

_UNITS = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def decimal_bytes(n: int) -> str:
    """``1_571_315`` → ``"1.5 MB"``: decimal units, one place, truncated; under 1 kB in B."""
    if n < 0:
        raise ValueError("a byte count is not negative")
    for unit, size in _UNITS:
        if n >= size:
            return f"{n // size}.{n % size * 10 // size} {unit}"
    return f"{n} B"
