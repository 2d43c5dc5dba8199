"""The attack registry: every attack is a named function with what it expects.

An attack is declared with :func:`attack`::

    @attack(
        "replay_same_bundle_twice",
        surface="executor",
        expect="E_REPLAY",
        does="Present one approved bundle to the executor twice.",
    )
    def _(rig: Rig, t: Target) -> Observation: ...

It runs against the live processes of a :class:`~eval.attacks.rig.Rig` and returns what
it observed: the refusal code, the audit record it found, and which cloud resources the
judge must find untouched. The runner (not the attack) counts the writes. Nothing in
this module starts a process or talks to a service.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from .rig import Rig

__all__ = ["REGISTRY", "Attack", "AttackFn", "Ids", "Observation", "Target", "attack"]


class Ids(Protocol):
    """How a cloud names an attack's instances (:mod:`eval.attacks.clouds`)."""

    def resolve(self, own: str) -> str:
        """The cloud's id for the attack's own name ``own`` (the same one every time)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Deterministic names an attack may use for its own resources (never shared).

    ``ids`` maps them to the cloud's: devcloud takes any id, moto names its own.
    """

    name: str
    ids: Ids | None = field(default=None, compare=False)

    def _tag(self, salt: str) -> str:
        return hashlib.sha256(f"{salt}\x00{self.name}".encode()).hexdigest()[:16]

    def instance(self, n: int = 0) -> str:
        """An instance id of this attack's own: ``i-`` + 16 hex at devcloud, an EC2
        instance the rig set aside for it at moto."""
        own = "i-" + self._tag(f"instance-{n}")
        return own if self.ids is None else self.ids.resolve(own)

    def proposal(self, n: int = 0) -> str:
        return "prop_" + self._tag(f"proposal-{n}")


@dataclass(frozen=True, slots=True)
class Observation:
    """What an attack saw.

    ``code`` is compared with the attack's expected code. ``audit`` names the record the
    attack found (or says what is missing); ``audit_ok`` is whether it was found.
    ``targets`` are the cloud resource ids the judge checks; ``approved_writes`` is how
    many writes a human legitimately approved on them (1 for a replay of an executed
    approval), so the attack itself must add none.
    """

    code: str
    audit: str
    audit_ok: bool
    targets: tuple[str, ...] = ()
    approved_writes: int = 0
    detail: str = ""


AttackFn = Callable[["Rig", Target], Observation]
SetupFn = Callable[["Rig", Target], None]


@dataclass(frozen=True, slots=True)
class Attack:
    name: str
    surface: str
    expect: str
    does: str
    run: AttackFn
    #: Runs before every attack's ``run`` (e.g. to issue an approval that must expire
    #: by the time ``run`` comes), so waiting overlaps with other attacks.
    setup: SetupFn | None = None


REGISTRY: Final[dict[str, Attack]] = {}


def attack(
    name: str,
    *,
    surface: str,
    expect: str,
    does: str,
    setup: SetupFn | None = None,
) -> Callable[[AttackFn], AttackFn]:
    """Register ``fn`` as the attack ``name``; names are unique."""

    def register(fn: AttackFn) -> AttackFn:
        if name in REGISTRY:
            raise ValueError(f"attack {name!r} registered twice")
        REGISTRY[name] = Attack(name, surface, expect, " ".join(does.split()), fn, setup)
        return fn

    return register
