"""A ledger database made before the ledger moved into the kernel upgrades and works.

Such a database names one of the historic revisions (tests/ledger/test_kernel.py) in
``alembic_version``; the kernel's migrations take it to head in place, and the executor
then goes on where it stopped: the approvals it used are still used, new ones run once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from airlock.ledger import MIGRATIONS_DIR
from airlock.store import make_engine, upgrade
from services.executor import State, migrate
from services.executor.models import ledger
from tests.ledger.test_kernel import HISTORIC

from .support import FakeClock, InMemoryCloud, make_executor, make_test_bundle


def _head() -> str:
    from alembic.script import ScriptDirectory

    from airlock.store import alembic_config

    head = ScriptDirectory.from_config(alembic_config(MIGRATIONS_DIR)).get_current_head()
    assert head is not None
    return head


def _version(url: str) -> str:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar())
    finally:
        engine.dispose()


def test_a_ledger_at_the_last_revision_before_the_move_upgrades_and_works(
    db_url: str, tmp_path: Path
) -> None:
    engine = make_engine(db_url)
    upgrade(engine, MIGRATIONS_DIR, revision=HISTORIC[-1])
    cloud, clock = InMemoryCloud(), FakeClock()
    old, new = make_test_bundle(1, tag="before"), make_test_bundle(2, tag="after")
    for bundle in (old, new):
        cloud.add("ecs.instance", bundle.resource_id)
    # Today's executor writes columns added since (0011's effect key): the old ledger's
    # row is the one it writes in a scratch ledger, less those columns.
    scratch = make_engine(f"sqlite:///{tmp_path / 'scratch.db'}")
    migrate(scratch)
    scratch.dispose()
    before = make_executor(f"sqlite:///{tmp_path / 'scratch.db'}", cloud, clock)
    assert before.execute(old.raw).state is State.SUCCEEDED
    with before.engine.connect() as conn:
        row = dict(conn.execute(sa.select(ledger)).mappings().one())
    before.engine.dispose()
    del row["effect_key"]
    with engine.begin() as conn:
        conn.execute(sa.insert(ledger).values(**row))
    engine.dispose()

    engine = make_engine(db_url)
    migrate(engine)
    engine.dispose()
    assert _version(db_url) == _head()

    after = make_executor(db_url, cloud, clock, worker_id="after-the-move")
    try:
        assert after.execute(old.raw).refusal_code == "E_REPLAY"
        assert after.execute(new.raw).state is State.SUCCEEDED
        with after.engine.connect() as conn:
            states = dict(conn.execute(sa.select(ledger.c.approval_id, ledger.c.state)).all())
        assert states == {old.approval_id: "succeeded", new.approval_id: "succeeded"}
        assert cloud.writes_for(old.resource_id) == 1
        assert cloud.writes_for(new.resource_id) == 1
    finally:
        after.engine.dispose()


@pytest.mark.parametrize("revision", HISTORIC)
def test_a_ledger_at_any_historic_revision_upgrades_to_head(sqlite_url: str, revision: str) -> None:
    engine = make_engine(sqlite_url)
    upgrade(engine, MIGRATIONS_DIR, revision=revision)
    migrate(engine)
    engine.dispose()
    cloud, clock = InMemoryCloud(), FakeClock()
    bundle = make_test_bundle(1, tag="hist")
    cloud.add("ecs.instance", bundle.resource_id)
    executor = make_executor(sqlite_url, cloud, clock)
    try:
        assert executor.execute(bundle.raw).state is State.SUCCEEDED
    finally:
        executor.engine.dispose()
