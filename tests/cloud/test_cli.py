"""``airlock devcloud seed`` writes the same fleet for the same seed; serve refuses prod."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from airlock.cli import app
from airlock.cloud.ports import UnknownOutcome
from devstack.devcloud import REGION, DevcloudHandle


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


def _devcloud_cli(devcloud: DevcloudHandle, home: Path, *args: str) -> Result:
    """``airlock devcloud ARGS`` as a person next to up's state directory ``home``."""
    home.mkdir(exist_ok=True)
    (home / "devcloud-admin-token").write_text(devcloud.admin.token + "\n")
    env = {"AIRLOCK_DEVCLOUD_URL": devcloud.base_url, "AIRLOCK_UP_HOME": str(home)}
    return CliRunner().invoke(app, ["devcloud", *args], env=env)


def test_devcloud_faults_and_writes_answer_did_it_happen_in_one_command(
    devcloud: DevcloudHandle, fresh_ecs_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in_doubt is resolved by checking the cloud: the README's curl to a hard-coded
    port with a token file is now ``airlock devcloud faults|writes``."""
    monkeypatch.delenv("AIRLOCK_DEVCLOUD_ADMIN_TOKEN", raising=False)
    home = tmp_path / "state"
    devcloud.admin.create_instance(fresh_ecs_id)
    set_ = _devcloud_cli(
        devcloud, home, "faults", "--fail-next-writes", "1", "--fail-kind", "internal"
    )
    assert set_.exit_code == 0, set_.output
    assert "fail_next_writes 1" in set_.output and "fail_kind        internal" in set_.output
    assert devcloud.admin.faults()["fail_next_writes"] == 1
    with pytest.raises(UnknownOutcome):
        devcloud.writer().stop_ecs(REGION, fresh_ecs_id, stopped_mode="StopCharging")
    none = _devcloud_cli(devcloud, home, "writes", "--resource", fresh_ecs_id)
    assert none.exit_code == 0, none.output
    assert none.output == f"no writes to {fresh_ecs_id}: devcloud carried out none\n"

    result = devcloud.writer().stop_ecs(REGION, fresh_ecs_id, stopped_mode="StopCharging")
    one = _devcloud_cli(devcloud, home, "writes", "--resource", fresh_ecs_id)
    [line] = one.output.splitlines()
    assert "StopInstance" in line and fresh_ecs_id in line and result.request_id in line
    as_json = json.loads(_devcloud_cli(devcloud, home, "writes", "--json").output)
    assert [w["request_id"] for w in as_json if w["resource_id"] == fresh_ecs_id] == [
        result.request_id
    ]
    cleared = _devcloud_cli(devcloud, home, "faults", "--clear")
    assert cleared.exit_code == 0 and "fail_next_writes 0" in cleared.output


def test_devcloud_faults_without_a_token_or_with_a_wrong_one_say_so(
    devcloud: DevcloudHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRLOCK_DEVCLOUD_ADMIN_TOKEN", raising=False)
    env = {"AIRLOCK_DEVCLOUD_URL": devcloud.base_url, "AIRLOCK_UP_HOME": str(tmp_path)}
    missing = CliRunner().invoke(app, ["devcloud", "faults"], env=env)
    assert missing.exit_code == 2 and "--devcloud-admin" in missing.output
    (tmp_path / "devcloud-admin-token").write_text("not-the-token-at-all")
    wrong = CliRunner().invoke(app, ["devcloud", "writes"], env=env)
    assert wrong.exit_code == 1 and "refused the admin token" in wrong.output


def test_devcloud_writes_follows_the_port_up_serves(
    devcloud: DevcloudHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``up --devcloud-port N`` the commands ask devcloud on N, not 8788."""
    monkeypatch.delenv("AIRLOCK_DEVCLOUD_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("AIRLOCK_DEVCLOUD_URL", raising=False)
    (tmp_path / "devcloud-admin-token").write_text(devcloud.admin.token)
    port = int(devcloud.base_url.rsplit(":", 1)[1])
    (tmp_path / "up.json").write_text(
        json.dumps({"status": "running", "pid": os.getpid(), "ports": {"devcloud": port}})
    )
    result = CliRunner().invoke(app, ["devcloud", "faults"], env={"AIRLOCK_UP_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert "fail_next_writes" in result.output
