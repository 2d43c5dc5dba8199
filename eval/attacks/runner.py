"""Run the registered attacks against one rig and judge each; render RESULTS.md.

The judge for every attack is the same: the observed code equals the expected one, the
audit record the attack looked for was found, and the cloud's own record (devcloud's
write log, moto's recorder) shows no write on the attack's targets beyond the ones a
human approved — none for a refused attack, exactly one where the attack expects the
legitimate write. The rendered report holds no time, duration, port or random id, so a
fresh run reproduces it byte for byte.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .clouds import CloudName
from .registry import REGISTRY, Attack, Observation, Target
from .rig import Rig, started_rig

__all__ = ["MODULES", "RESULTS", "Result", "Suite", "render", "run_on", "run_suite", "selected"]

#: Where each cloud's whole run is recorded.
RESULTS: Final[dict[CloudName, str]] = {"devcloud": "RESULTS.md", "moto": "RESULTS-moto.md"}

#: Surfaces in the order they run (and appear in RESULTS.md).
MODULES: Final = (
    "bundle",
    "replay",
    "lifecycle",
    "drift",
    "checkpoint_api",
    "receipts",
    "injection",
    "webapp",
    "startup",
)


@dataclass(frozen=True, slots=True)
class Result:
    attack: Attack
    observed: Observation
    writes: int  # writes on the targets beyond the approved ones

    @property
    def passed(self) -> bool:
        o = self.observed
        return o.code == self.attack.expect and self.writes == 0 and o.audit_ok


@dataclass(frozen=True, slots=True)
class Suite:
    results: tuple[Result, ...]
    chains: dict[str, bool]
    cloud: CloudName = "devcloud"

    @property
    def misses(self) -> list[Result]:
        return [r for r in self.results if not r.passed]

    @property
    def ok(self) -> bool:
        return not self.misses and all(self.chains.values())


def selected(only: Sequence[str] = ()) -> list[Attack]:
    for module in MODULES:
        importlib.import_module(f"{__package__}.{module}")
    unknown = sorted(set(only) - set(REGISTRY))
    if unknown:
        raise KeyError(f"no such attack: {', '.join(unknown)}")
    return [a for a in REGISTRY.values() if not only or a.name in only]


def _judge(rig: Rig, attack: Attack, target: Target) -> Result:
    try:
        observed = attack.run(rig, target)
    except Exception as exc:  # an attack that crashes is a miss, reported, not a pass
        observed = Observation("ERROR", f"{type(exc).__name__}: {exc}"[:300], False)
    writes = sum(rig.writes(r) for r in observed.targets)
    return Result(attack, observed, writes - observed.approved_writes)


def run_suite(
    workdir: Path,
    only: Sequence[str] = (),
    progress: Callable[[str], None] = print,
    cloud: CloudName = "devcloud",
) -> Suite:
    """Start one rig against ``cloud``, run the attacks (``only`` those, when named),
    judge each; the suite with every audit chain re-verified at the end."""
    attacks = selected(only)
    with started_rig(workdir, cloud) as rig:
        return run_on(rig, attacks, progress)


def run_on(rig: Rig, attacks: Sequence[Attack], progress: Callable[[str], None] = print) -> Suite:
    """Run ``attacks`` against a started rig and judge each (:func:`run_suite`)."""
    results: list[Result] = []
    progress(f"stack up ({rig.cloud.name}); {len(attacks)} attacks")
    targets = {a.name: Target(a.name, rig.cloud) for a in attacks}
    setup_errors: dict[str, str] = {}
    for attack in attacks:
        if attack.setup is not None:
            try:
                attack.setup(rig, targets[attack.name])
            except Exception as exc:
                setup_errors[attack.name] = f"setup {type(exc).__name__}: {exc}"[:300]
    for n, attack in enumerate(attacks, 1):
        if attack.name in setup_errors:
            result = Result(attack, Observation("ERROR", setup_errors[attack.name], False), 0)
        else:
            result = _judge(rig, attack, targets[attack.name])
        results.append(result)
        mark = "ok  " if result.passed else "MISS"
        progress(
            f"[{n:2d}/{len(attacks)}] {mark} {attack.name}: {result.observed.code}"
            f" (expected {attack.expect}), writes {result.writes}"
            + ("" if result.passed else f" — {result.observed.audit}")
        )
    return Suite(tuple(results), rig.chains(), rig.cloud.name)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_WORLD: Final[dict[CloudName, tuple[str, str, str, str]]] = {
    # (how the run is started, its test, the cloud the executors write to, what counts writes)
    "devcloud": (
        "python -m eval.attacks",
        "tests/eval/test_attacks.py",
        "devcloud (Alibaba's double: ECS actions)",
        "entries in devcloud's write log",
    ),
    "moto": (
        "python -m eval.attacks --cloud moto",
        "tests/eval/test_moto_attacks.py",
        "a moto server with IAM enforced (AWS's double: EC2 actions, provider aws)",
        "write requests moto's recorder holds under the executors' key (a refused attempt "
        "counts too)",
    ),
}


def render(suite: Suite) -> str:
    """The run's report (RESULTS.md, RESULTS-moto.md): deterministic for a given set of
    outcomes."""
    n = len(suite.results)
    passed = n - len(suite.misses)
    command, test, world, counted = _WORLD[suite.cloud]
    other: CloudName = "moto" if suite.cloud == "devcloud" else "devcloud"
    title = "# Attack suite results" + ("" if suite.cloud == "devcloud" else f" ({suite.cloud})")
    lines = [
        title,
        "",
        f"**{n} attacks: {passed} refused as expected with zero unapproved writes and the "
        f"audit record found; {len(suite.misses)} missed.**",
        "",
        f"Generated by `{command}` (do not edit; `{test}` "
        "fails when a fresh run differs). Every attack runs end to end against real "
        f"processes on loopback: {world}, the checkpoint and the executor daemon fed by its "
        "feed, the web app, a second executor daemon sharing the ledger, and checkpoints "
        "with databases of their own (see `eval/attacks/rig.py`). *writes* counts the "
        f"{counted} for the attack's targets beyond the writes a human "
        "approved (the exactly-once judge); *audit record* is what the attack found in the "
        "executor ledger, the checkpoint's audit chain (and, for unauthenticated requests, its "
        f"refusal counter). The same attacks against {other}: [{RESULTS[other]}]"
        f"({RESULTS[other]}).",
        "",
        "| # | attack | surface | expected | observed | writes | audit record | pass |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(suite.results, 1):
        approved = r.observed.approved_writes
        writes = f"{r.writes}" + (f" (+{approved} approved)" if approved else "")
        lines.append(
            f"| {i} | `{r.attack.name}` | {r.attack.surface} | `{r.attack.expect}` | "
            f"`{_cell(r.observed.code)}` | {writes} | {_cell(r.observed.audit)} | "
            f"{'pass' if r.passed else '**MISS**'} |"
        )
    lines += ["", "Audit chains after the run (re-derived from genesis):", ""]
    for name, ok in suite.chains.items():
        lines.append(f"- {name}: {'verifies' if ok else '**BROKEN**'}")
    lines += ["", "## What each attack does", ""]
    for r in suite.results:
        lines.append(f"- `{r.attack.name}` — {r.attack.does}")
    lines.append("")
    return "\n".join(lines)
