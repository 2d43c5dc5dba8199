"""``airlock devcloud seed`` writes the same fleet for the same seed; serve refuses prod."""

from __future__ import annotations

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


def _start(db: Path, **settings: object) -> int:
    """Build devcloud's app on ``db`` as a start does; the number of instances it seeded."""
    from airlock.settings import DevcloudSettings
    from services.devcloud import create_app

    app = create_app(DevcloudSettings(AIRLOCK_ENV="dev", db_path=db, **settings))
    app.state.store.close()
    return int(app.state.seeded)


def test_a_start_seeds_a_database_never_seeded_and_keeps_it_after(tmp_path: Path) -> None:
    """compose's demo devcloud seeds itself (AIRLOCK_DEVCLOUD_SEED_INSTANCES): once, in
    the regions asked for, and a restart keeps the fleet, what the demo did to it too."""
    db = tmp_path / "devcloud.db"
    assert _start(db, seed_instances=30, seed_regions=("cn-hangzhou",)) == 33
    first = _ids(db)
    assert len(first) == 33
    with sqlite3.connect(db) as conn:
        assert {r for (r,) in conn.execute("SELECT DISTINCT region FROM instances")} == {
            "cn-hangzhou"
        }
        conn.execute("DELETE FROM instances WHERE id = ?", (first[0][0],))  # the demo deletes one
    assert _start(db, seed_instances=30, seed_regions=("cn-hangzhou",)) == 0
    assert _ids(db) == first[1:]


def test_a_start_keeps_a_fleet_seeded_by_devcloud_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    db = tmp_path / "devcloud.db"
    seeded = CliRunner().invoke(app, ["devcloud", "seed", "--instances", "5", "--db", str(db)])
    assert seeded.exit_code == 0, seeded.output
    before = _ids(db)
    assert _start(db, seed_instances=30) == 0
    assert _ids(db) == before


def test_a_start_without_seed_instances_seeds_nothing(tmp_path: Path) -> None:
    db = tmp_path / "devcloud.db"
    assert _start(db) == 0
    assert _ids(db) == []
