"""Migrations: idempotent, all or nothing, usable from the alembic CLI and offline."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from airlock.store import (
    AUDIT_TABLE,
    MigrationError,
    alembic_config,
    make_engine,
    upgrade,
    verify_chain,
)
from airlock.store._migrate import _include_object

from ._support import MIGRATIONS

FAILING = Path(__file__).parent / "migrations_failing"


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_twice_is_a_no_op_the_second_time(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine, MIGRATIONS)
        upgrade(engine, MIGRATIONS)
        with engine.connect() as conn:
            assert (
                conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "0002"
            )
            assert conn.execute(sa.text("SELECT count(*) FROM audit_log")).scalar() == 1
        assert verify_chain(engine).ok
    finally:
        engine.dispose()


def test_a_failing_revision_leaves_nothing_behind(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with pytest.raises(RuntimeError, match="fails on purpose"):
            upgrade(engine, FAILING)
    finally:
        engine.dispose()
    # Not even revision 0001's audit_log, nor alembic's version table: one transaction.
    assert _tables(db_url) == set()


def test_upgrade_to_an_intermediate_revision_then_head(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine, MIGRATIONS, revision="0001")
        assert _tables(db_url) == {"alembic_version", AUDIT_TABLE}
        upgrade(engine, MIGRATIONS)
        assert _tables(db_url) == {"alembic_version", AUDIT_TABLE, "widgets"}
    finally:
        engine.dispose()


def test_alembic_cli_path_connects_itself_under_the_lock(db_url: str) -> None:
    # What `alembic -x db=URL upgrade head` does: env.py gets no connection from upgrade().
    command.upgrade(alembic_config(MIGRATIONS, url=db_url), "head")
    assert _tables(db_url) == {"alembic_version", AUDIT_TABLE, "widgets"}


@pytest.mark.parametrize(
    ("url", "trigger_sql"),
    [
        ("sqlite:///offline.db", "CREATE TRIGGER audit_log_no_update BEFORE UPDATE"),
        ("postgresql://nobody@127.0.0.1/offline", "BEFORE UPDATE OR DELETE ON audit_log"),
    ],
)
def test_offline_sql_renders_table_triggers_and_genesis(
    url: str, trigger_sql: str, capsys: pytest.CaptureFixture[str]
) -> None:
    command.upgrade(alembic_config(MIGRATIONS, url=url), "head", sql=True)
    out = capsys.readouterr().out
    assert "CREATE TABLE audit_log" in out
    assert trigger_sql in out
    assert "airlock.audit/genesis" in out


def test_autogenerate_never_proposes_dropping_the_audit_log(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        upgrade(engine, MIGRATIONS, revision="0001")
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"include_object": _include_object})
            assert compare_metadata(context, sa.MetaData()) == []
    finally:
        engine.dispose()


def test_directory_without_env_py_is_refused(tmp_path: Path, sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        with pytest.raises(MigrationError, match=r"env\.py"):
            upgrade(engine, tmp_path)
        (tmp_path / "env.py").write_text("")
        with pytest.raises(MigrationError, match="versions"):
            upgrade(engine, tmp_path)
    finally:
        engine.dispose()


_PARENT_CHILD = """
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table("parent", sa.Column("id", sa.Integer, primary_key=True))
    op.create_table(
        "child",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "parent_id",
            sa.Integer,
            sa.ForeignKey("parent.id", ondelete="CASCADE"),
            nullable=False,
        ),
    )
    op.execute("INSERT INTO parent (id) VALUES (1)")
    op.execute("INSERT INTO child (id, parent_id) VALUES (10, 1)")
"""


def _migrations(tmp_path: Path, second: str) -> Path:
    directory = tmp_path / "migrations"
    (directory / "versions").mkdir(parents=True)
    (directory / "env.py").write_text((MIGRATIONS / "env.py").read_text())
    (directory / "versions" / "0001_parent_child.py").write_text(_PARENT_CHILD)
    (directory / "versions" / "0002_second.py").write_text(
        'import sqlalchemy as sa\nfrom alembic import op\n\nrevision = "0002"\n'
        f'down_revision = "0001"\n\n\ndef upgrade() -> None:\n{second}'
    )
    return directory


def test_sqlite_batch_rebuild_of_a_parent_table_keeps_its_children(
    tmp_path: Path, sqlite_url: str
) -> None:
    # batch_alter_table on SQLite is DROP TABLE + rename; with foreign keys on, the DROP
    # would cascade-delete every child row.
    directory = _migrations(
        tmp_path,
        '    with op.batch_alter_table("parent", recreate="always") as batch:\n'
        '        batch.add_column(sa.Column("name", sa.String(10), nullable=True))\n',
    )
    engine = make_engine(sqlite_url)
    try:
        upgrade(engine, directory)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM child")).scalar() == 1
        raw = engine.raw_connection()  # the pooled connection has foreign keys back on
        try:
            assert raw.cursor().execute("PRAGMA foreign_keys").fetchone() == (1,)
        finally:
            raw.close()
    finally:
        engine.dispose()


def test_sqlite_migration_leaving_a_dangling_foreign_key_is_rolled_back(
    tmp_path: Path, sqlite_url: str
) -> None:
    directory = _migrations(tmp_path, '    op.execute("INSERT INTO child VALUES (11, 99)")\n')
    engine = make_engine(sqlite_url)
    try:
        with pytest.raises(MigrationError, match="foreign key"):
            upgrade(engine, directory)
    finally:
        engine.dispose()
    assert _tables(sqlite_url) == set()


_EVERY_SERVICE = [
    Path(__file__).parents[2] / "services" / "checkpoint" / "migrations",
    Path(__file__).parents[2] / "airlock" / "ledger" / "migrations",
    MIGRATIONS,
    FAILING,
]


@pytest.mark.parametrize("location", _EVERY_SERVICE, ids=lambda p: p.parent.name)
def test_the_head_read_from_the_files_is_alembics_head(location: Path) -> None:
    """The start-up shortcut (no Alembic when at head) must name the head Alembic would."""
    from alembic.script import ScriptDirectory

    from airlock.store._migrate import _script_head

    assert (
        _script_head(location)
        == ScriptDirectory.from_config(alembic_config(location)).get_current_head()
    )


def test_a_revision_file_the_shortcut_cannot_read_sends_it_to_alembic(tmp_path: Path) -> None:
    from airlock.store._migrate import _script_head

    versions = tmp_path / "versions"
    versions.mkdir()
    (versions / "0001_a.py").write_text('revision = "0001"\ndown_revision = None\n')
    (versions / "0002_b.py").write_text('revision = "0002"\ndown_revision = "0001"\n')
    assert _script_head(tmp_path) == "0002"
    (versions / "0003_c.py").write_text('revision = "0003"\ndown_revision = ("0001", "0002")\n')
    assert _script_head(tmp_path) is None
    (versions / "0003_c.py").write_text("revision = '0003'\ndown_revision = '0002'\n")
    assert _script_head(tmp_path) is None  # another spelling: unsure, so Alembic decides


def test_a_database_behind_the_head_is_migrated_not_skipped(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine, MIGRATIONS, revision="0001")
        upgrade(engine, MIGRATIONS)
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        assert version == "0002"
    finally:
        engine.dispose()


def test_a_database_at_a_revision_the_scripts_do_not_know_is_refused(db_url: str) -> None:
    """A database migrated by a newer release is never taken for one at head."""
    from alembic.util import CommandError

    engine = make_engine(db_url)
    try:
        upgrade(engine, MIGRATIONS)
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '0003'"))
        with pytest.raises(CommandError, match="Can't locate revision identified by '0003'"):
            upgrade(engine, MIGRATIONS)
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        assert version == "0003"
    finally:
        engine.dispose()
