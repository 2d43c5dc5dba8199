"""The attack suite, end to end, once per test run: every attack refused, RESULTS.md fresh.

One rig (devcloud, the checkpoint, the executor daemon on its feed, the web app, a second
executor on the same ledger and three more checkpoints) is started for the module and
every registered attack runs against it. A miss — wrong code, a write devcloud logged, a
missing audit record — fails :func:`test_every_attack_is_refused_as_expected` with the
attack's own line; :func:`test_committed_results_match_a_fresh_run` fails when the
committed ``eval/RESULTS.md`` is not what this run renders (rerun
``python -m eval.attacks`` and commit the file).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eval.attacks import REGISTRY, Suite, render, run_suite, selected

RESULTS = Path(__file__).resolve().parents[2] / "eval" / "RESULTS.md"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    lines: list[str] = []
    result = run_suite(tmp_path_factory.mktemp("attacks"), progress=lines.append)
    print("\n".join(lines))  # shown with -s, or for a failing test
    return result


def test_registry_names_attacks_after_the_attack() -> None:
    attacks = selected()
    assert len(attacks) >= 40
    assert len({a.name for a in attacks}) == len(attacks) == len(REGISTRY)
    for a in attacks:
        assert re.fullmatch(r"[a-z][a-z0-9_]+", a.name), a.name
        assert a.expect and a.does and a.surface


@pytest.mark.slow  # the module's rig: a minute of processes
def test_every_attack_is_refused_as_expected(suite: Suite) -> None:
    misses = [
        f"{r.attack.name}: expected {r.attack.expect}, observed {r.observed.code}, "
        f"{r.writes} unapproved write(s); audit: {r.observed.audit}"
        for r in suite.misses
    ]
    assert not misses, "\n".join(misses)
    assert all(suite.chains.values()), suite.chains


@pytest.mark.slow  # the module's rig: a minute of processes
def test_committed_results_match_a_fresh_run(suite: Suite) -> None:
    fresh = render(suite)
    committed = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    assert committed == fresh, (
        "eval/RESULTS.md differs from a fresh run: run `python -m eval.attacks` and commit it"
    )
