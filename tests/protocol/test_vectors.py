"""Conformance vectors, case by case, and the guarantee that our own never drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eval import conformance, make_vectors

SETS = conformance.all_sets()
ALL = [case for cases in SETS.values() for case in cases]


@pytest.fixture(scope="module")
def vector_dir() -> Path:
    return conformance.DEFAULT_VECTORS


def test_every_vendored_set_is_complete() -> None:
    assert len(SETS["RFC 8785 (JCS)"]) == 6
    assert len(SETS["Wycheproof Ed25519"]) == 151
    assert len(SETS["DSSE v1 PAE"]) == 1
    assert len(SETS["Airlock actions"]) >= 12
    assert len(SETS["Airlock approvals"]) >= 6
    assert len(SETS["Airlock tool calls"]) >= 8
    assert len(SETS["Airlock tool approvals"]) >= 7


@pytest.mark.parametrize("case", ALL, ids=[f"{c.set_name}:{c.name}" for c in ALL])
def test_vector(case: conformance.Case) -> None:
    case.check()


def test_wycheproof_invalid_cases_are_really_refused(vector_dir: Path) -> None:
    # Guard against a check that passes everything: the set has both kinds.
    import json

    data = json.loads((vector_dir / "wycheproof" / "ed25519_test.json").read_bytes())
    results = [t["result"] for g in data["testGroups"] for t in g["tests"]]
    assert results.count("valid") == 88
    assert results.count("invalid") == 63


def test_regenerating_own_vectors_changes_nothing(vector_dir: Path) -> None:
    for name, data in make_vectors.render().items():
        committed = (vector_dir / "airlock" / name).read_bytes()
        assert data == committed, f"{name} drifted: run `python -m eval.make_vectors` and review"


def test_a_tampered_vector_is_reported(tmp_path: Path, vector_dir: Path) -> None:
    import shutil

    copy = tmp_path / "vectors"
    shutil.copytree(vector_dir, copy)
    target = copy / "jcs" / "output" / "values.json"
    target.write_bytes(target.read_bytes().replace(b"4.5", b"4.50"))
    assert conformance.run(copy) == 1


def test_conformance_command_reports_every_set() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "airlock.cli", "conformance"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6/6 sets passed" in result.stdout
    assert "151/151 cases passed" in result.stdout
    assert "conformance: OK" in result.stdout


def test_the_installed_script_finds_the_suite_from_any_directory(tmp_path: Path) -> None:
    """The `airlock` console script has the packages on its path, not the checkout, so
    `airlock conformance` said the suite was missing unless run as `python -m`."""
    script = Path(sys.executable).with_name("airlock")
    result = subprocess.run(
        [str(script), "conformance"], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "conformance: OK" in result.stdout


def test_a_missing_vector_directory_is_a_usage_error(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("airlock")
    result = subprocess.run(
        [str(script), "conformance", "--vectors", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "not a directory" in result.stderr and "Traceback" not in result.stderr
