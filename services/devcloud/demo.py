"""Realistic names for the demo fleet that ``airlock up`` seeds.

The generated fleet (fleet.py) names instances and tags like an attacker would
(``<script>…``, quotes, markup): right for the tests, which prove nothing of it runs,
but alarming to a newcomer opening the queue. ``demo_names`` renames a generated fleet
deterministically and changes nothing else: ids, classes, metrics, statuses and the tags
that decide a class (a protect tag, a ``prod…`` environment) are kept as they mean.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from .fleet import InstanceSpec

__all__ = ["demo_names"]

_ECS_ROLES: Final = (
    "web",
    "api",
    "worker",
    "batch",
    "cache",
    "etl",
    "build-runner",
    "jump-host",
    "search",
    "queue",
    "reports",
    "ml-train",
)
_RDS_ROLES: Final = ("orders-db", "billing-db", "users-db", "analytics-db", "inventory-db")
_DESCRIPTIONS: Final = (
    "nightly reports",
    "legacy import job",
    "load test box",
    "left over from the 2025 migration",
    "demo for the sales team",
)
#: Tag values of the generated fleet that hold markup or quotes, and what the demo says.
_PLAIN_VALUES: Final = {
    "<i>growth</i>": "growth",
    'ml "research"': "ml-research",
    "production-<blue>": "production-blue",  # still prod…: the class is kept
}


def _env(tags: Sequence[tuple[str, str]]) -> str:
    for key, value in tags:
        if key.lower() in ("env", "environment"):
            return "prod" if value.lower().startswith("prod") else value.lower()
    return "dev"


def _tags(rng: random.Random, tags: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    out = []
    for key, value in tags:
        said = rng.choice(_DESCRIPTIONS) if key == "description" else value
        out.append((key, _PLAIN_VALUES.get(said, said)))
    return tuple(out)


def demo_names(fleet: Sequence[InstanceSpec]) -> list[InstanceSpec]:
    """``fleet`` with realistic names (``web-staging-07``) and tag values without markup.

    Deterministic: the same fleet is renamed the same way in any process. Nothing but
    ``name`` and the text of tag values changes.
    """
    renamed = []
    for index, spec in enumerate(fleet):
        # Reproducible names, nothing secret.
        rng = random.Random(f"devcloud-demo-names:{spec.id}")  # noqa: S311
        roles = _RDS_ROLES if spec.kind == "rds" else _ECS_ROLES
        name = f"{rng.choice(roles)}-{_env(spec.tags)}-{index:02d}"
        renamed.append(replace(spec, name=name, tags=_tags(rng, spec.tags)))
    return renamed
