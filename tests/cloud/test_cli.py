"""``airlock devcloud seed`` writes the same fleet for the same seed; serve refuses prod."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airlock.cli import app


def _ids(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT id, name FROM instances ORDER BY ord"))


def test_seed_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    args = [
        "devcloud",
        "seed",
        "--instances",
        "60",
        "--rds",
        "6",
        "--seed",
        "4",
        "--now",
        "1790000000",
    ]
    first = CliRunner().invoke(app, [*args, "--db", str(tmp_path / "a.db")])
    second = CliRunner().invoke(app, [*args, "--db", str(tmp_path / "b.db")])
    assert first.exit_code == second.exit_code == 0, first.output
    assert "seeded 66 instances" in first.output
    assert _ids(tmp_path / "a.db") == _ids(tmp_path / "b.db")


def test_devcloud_refuses_to_start_outside_dev(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AIRLOCK_ENV", raising=False)
    monkeypatch.setenv("AIRLOCK_DEVCLOUD_ADMIN_TOKEN", "do-not-print-this-token")
    result = CliRunner().invoke(app, ["devcloud", "serve", "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 2
    assert "AIRLOCK_ENV=dev" in result.output
    assert "do-not-print-this-token" not in result.output


_MARKUP = ("<", ">", '"', "&", "`", "$", "\\")


def _names_and_tags(db: Path) -> list[tuple[str, str, str]]:
    """(id, name, every tag value) of each instance."""
    with sqlite3.connect(db) as conn:
        rows = list(conn.execute("SELECT id, name, tags FROM instances ORDER BY ord"))
    return [(i, name, " ".join(v for _, v in json.loads(tags))) for i, name, tags in rows]


def test_seed_names_the_demo_fleet_plainly_and_keeps_hostile_names_for_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """up seeds through this command: a newcomer's queue showed ``<script>alert('xss')…``
    as instance names. The hostile fleet stays one flag away, with the same ids."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    args = ["devcloud", "seed", "--instances", "120", "--seed", "1", "--now", "1790000000"]
    demo = CliRunner().invoke(app, [*args, "--db", str(tmp_path / "demo.db")])
    hostile = CliRunner().invoke(
        app, [*args, "--hostile-names", "--db", str(tmp_path / "hostile.db")]
    )
    assert demo.exit_code == hostile.exit_code == 0, demo.output + hostile.output
    plain = _names_and_tags(tmp_path / "demo.db")
    marked = _names_and_tags(tmp_path / "hostile.db")
    assert [row[0] for row in plain] == [row[0] for row in marked]
    assert not [row for row in plain if any(ch in row[1] + row[2] for ch in _MARKUP)]
    assert any("<script>" in row[1] for row in marked)
