"""What a resource's tags say about writing to it, read the same way by the agent (which
never proposes a production resource) and the executor (which re-checks live tags just
before the write, so a production tag added after the approval stops it).

Case-insensitive throughout, as the agent has always read tags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ProductionTags"]


@dataclass(frozen=True, slots=True)
class ProductionTags:
    """A tag whose key is one of ``keys`` and whose value starts with ``prefix`` marks
    production (``env=prod``, ``Environment=Production-EU``). No keys: nothing does."""

    keys: tuple[str, ...] = ("env", "environment")
    prefix: str = "prod"

    def match(self, tags: Mapping[str, str]) -> tuple[str, str] | None:
        """The first production tag (in key order), or None."""
        keys = {k.casefold() for k in self.keys}
        prefix = self.prefix.casefold()
        for key, value in sorted(tags.items()):
            if key.casefold() in keys and value.casefold().startswith(prefix):
                return key, value
        return None
