"""SQLite's REPLACE cannot delete a ledger row, or any row kept from DELETE (0008).

``INSERT OR REPLACE`` deletes the rows it conflicts with; without ``recursive_triggers``
(the sqlite3 shell) no DELETE trigger fires for that. Attacked here through a plain
``sqlite3.connect`` (the shell's view) and through ``make_engine`` (our own connections),
on every key of every table a trigger keeps from DELETE, as the database itself lists
them. PostgreSQL has no REPLACE (its upsert fires the UPDATE trigger; ``test_ledger``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from airlock import ledger as kernel_ledger
from airlock.protocol import verify_bundle
from airlock.store import make_engine, upgrade, verify_chain
from devstack import factory
from services.executor import MIGRATIONS_DIR, Executor, State, migrate, recover_expired
from services.executor.feed import advance_cursor
from services.executor.models import (
    deliveries,
    ledger,
    ledger_holds,
    resends,
    revocations,
)
from tests.support.replace import kept_tables, replace_attacks, snapshot

from .support import FakeClock, InMemoryCloud, make_executor, make_test_bundle

#: Every table of the executor whose rows are never deleted, and how an INSERT that
#: conflicts with one of its rows is refused: skipped (the tables our code inserts into
#: with ON CONFLICT DO NOTHING, which must keep its result) or an error.
IGNORED = {
    "executor_ledger",
    "executor_resolutions",
    "executor_feed_cursor",
    "executor_revocations",
    "executor_deliveries",
    "executor_resends",
    "executor_ledger_holds",
}
REFUSED = {"executor_refusals"}


@dataclass
class Ledger:
    path: Path
    url: str
    executor: Executor
    cloud: InMemoryCloud
    clock: FakeClock
    succeeded: str  # the approval id of a succeeded row


def _fill(url: str, path: Path) -> Ledger:
    cloud, clock = InMemoryCloud(), FakeClock()
    executor = make_executor(url, cloud, clock, worker_id="w1")
    done, doubt = make_test_bundle(1), make_test_bundle(2)
    for b in (done, doubt):
        cloud.add("ecs.instance", b.resource_id)
    assert executor.execute(done.raw).state is State.SUCCEEDED
    assert executor.execute(done.raw).refusal_code is not None  # a refusal row (E_REPLAY)
    cloud.next_fault = "timeout_before"
    assert executor.execute(doubt.raw).state is State.IN_DOUBT
    executor.resolve(doubt.approval_id, happened=False, by="alice", note="checked")
    with executor.engine.begin() as conn:
        advance_cursor(conn, "http://cp", 5, clock())
        conn.execute(
            sa.insert(revocations).values(
                approval_id="apv_revoked", feed="http://cp", feed_seq=4, received_at=clock()
            )
        )
        conn.execute(
            sa.insert(deliveries).values(
                kind="outcome",
                approval_id=done.approval_id,
                attempt=1,
                status="rejected",
                http_status=403,
                detail="",
                at=clock(),
            )
        )
        conn.execute(
            sa.insert(resends).values(
                kind="outcome",
                approval_id=done.approval_id,
                attempt=2,
                requested_by="alice",
                requested_at=clock(),
                note="",
            )
        )
        conn.execute(
            sa.insert(ledger_holds).values(
                feed="http://cp", head_seq=7, head_hash="ab" * 32, since=1, until=2
            )
        )
        # A gate's row: the one that holds an effect key (migration 0011).
        raw = factory.tool_bundle_for()
        verified = verify_bundle(raw, factory.keyset(), factory.TOOL_BINDING, factory.NOW)
        statement = verified.statement
        assert kernel_ledger.consume(
            conn,
            {
                "approval_id": statement.approval_id,
                "nonce": statement.nonce,
                "action_hash": verified.action_hash,
                **kernel_ledger.target_columns(verified),
                "action": verified.action_bytes,
                "bundle": raw,
                "keyid": verified.keyid,
                "expires_at": statement.expires_at,
                "state": "claimed",
                "lease_owner": "gate-1",
                "lease_epoch": 1,
                "lease_expires": clock() + 10**9,  # never recovered by the executor
                "claimed_at": clock(),
                "updated_at": clock(),
                "refusal_code": None,
                "cloud_request_id": None,
                "verified": False,
                "detail": "",
                "receipt": None,
                "effect_key": statement.effect_key,
            },
            now=clock(),
        )
    return Ledger(path, url, executor, cloud, clock, done.approval_id)


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[Ledger]:
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    filled = _fill(url, path)
    yield filled
    filled.executor.engine.dispose()


def _shell(path: Path) -> sqlite3.Connection:
    """What the sqlite3 shell gets: no pragma of ours, recursive_triggers off."""
    conn = sqlite3.connect(path, isolation_level=None)
    assert conn.execute("PRAGMA recursive_triggers").fetchone()[0] == 0
    return conn


def test_every_table_kept_from_delete_is_guarded_against_replace(filled: Ledger) -> None:
    with _shell(filled.path) as conn:
        kept = kept_tables(conn)
        guarded = {
            r[0]
            for r in conn.execute(
                "SELECT tbl_name FROM sqlite_master WHERE type = 'trigger' "
                "AND name = tbl_name || '_no_replace'"
            )
        }
    assert kept == IGNORED | REFUSED | {"audit_log"}
    assert guarded == kept


def test_insert_or_replace_cannot_replace_a_terminal_ledger_row(filled: Ledger) -> None:
    """The review's attack: a succeeded row swapped for a claimed one with an expired
    lease, which recovery would continue and write a second time."""
    with _shell(filled.path) as conn:
        conn.row_factory = sqlite3.Row
        row = dict(
            conn.execute(
                "SELECT * FROM executor_ledger WHERE approval_id = ?", (filled.succeeded,)
            ).fetchone()
        )
        row.update(state="claimed", lease_expires=0, receipt=None)
        conn.execute(
            f"INSERT OR REPLACE INTO executor_ledger ({', '.join(row)}) "
            f"VALUES ({', '.join(':' + c for c in row)})",
            row,
        )
    with filled.executor.engine.connect() as conn:
        state = conn.execute(
            sa.select(ledger.c.state).where(ledger.c.approval_id == filled.succeeded)
        ).scalar()
    assert state == "succeeded"
    filled.clock.advance(120)
    assert recover_expired(filled.executor) == []
    assert filled.cloud.writes_for(make_test_bundle(1).resource_id) == 1
    assert verify_chain(filled.executor.engine).ok


def test_insert_or_replace_in_the_sqlite3_shell_changes_no_kept_row(filled: Ledger) -> None:
    with _shell(filled.path) as conn:
        attacks = [a for t in sorted(IGNORED | REFUSED) for a in replace_attacks(conn, t)]
        assert {(str(a)) for a in attacks} == {
            "executor_ledger on rowid",
            "executor_ledger on approval_id",
            "executor_ledger on nonce",
            "executor_ledger on action_hash",
            "executor_ledger on effect_key",
            "executor_refusals on id",
            "executor_resolutions on rowid",
            "executor_resolutions on approval_id",
            "executor_feed_cursor on rowid",
            "executor_feed_cursor on feed",
            "executor_revocations on rowid",
            "executor_revocations on approval_id",
            "executor_deliveries on id",
            "executor_deliveries on kind+approval_id+attempt",
            "executor_resends on id",
            "executor_resends on kind+approval_id+attempt",
            "executor_ledger_holds on id",
            "executor_ledger_holds on feed+head_seq+head_hash",
        }
        for attack in attacks:
            before = snapshot(conn, attack.table)
            if attack.table in REFUSED:
                with pytest.raises(sqlite3.IntegrityError, match="conflicting with a row"):
                    conn.execute(attack.sql, attack.params)
            else:
                assert conn.execute(attack.sql, attack.params).rowcount == 0, attack
            assert snapshot(conn, attack.table) == before, attack


def test_insert_or_replace_through_make_engine_changes_no_kept_row(filled: Ledger) -> None:
    engine = filled.executor.engine
    with _shell(filled.path) as shell:
        attacks = [a for t in sorted(IGNORED | REFUSED) for a in replace_attacks(shell, t)]
    for attack in attacks:
        with _shell(filled.path) as shell:
            before = snapshot(shell, attack.table)
        if attack.table in REFUSED:
            with pytest.raises(IntegrityError, match="conflicting with a row"), engine.begin() as c:
                c.execute(sa.text(attack.sql), attack.params)
        else:
            with engine.begin() as c:
                assert c.execute(sa.text(attack.sql), attack.params).rowcount == 0, attack
        with _shell(filled.path) as shell:
            assert snapshot(shell, attack.table) == before, attack


def test_an_audit_row_cannot_be_replaced_by_a_row_extending_the_head(filled: Ledger) -> None:
    """The append-only trigger lets through a row that extends the head; REPLACE on its
    row_hash (or a rowid) would then delete an old row, a gap verify_chain would find."""
    with _shell(filled.path) as conn:
        seq, head = conn.execute(
            "SELECT seq, row_hash FROM audit_log ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        old_hash = conn.execute("SELECT row_hash FROM audit_log WHERE seq = 2").fetchone()[0]
        before = snapshot(conn, "audit_log")
        for sql, params in (
            (
                "INSERT OR REPLACE INTO audit_log (seq, event, prev_hash, row_hash) "
                "VALUES (?, '{}', ?, ?)",
                (seq + 1, head, old_hash),
            ),
            (
                "INSERT OR REPLACE INTO audit_log (rowid, seq, event, prev_hash, row_hash) "
                "VALUES (3, ?, '{}', ?, ?)",
                (seq + 1, head, "f" * 64),
            ),
        ):
            with pytest.raises(sqlite3.IntegrityError, match="conflicting with a row"):
                conn.execute(sql, params)
        assert snapshot(conn, "audit_log") == before
    assert verify_chain(filled.executor.engine).ok


def test_a_ledger_upgraded_to_0008_has_the_guards_of_a_fresh_one(tmp_path: Path) -> None:
    """An audit_log made before create_audit_log had its guard gets it from 0008."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    for path in (fresh, old):
        engine = make_engine(f"sqlite:///{path}")
        if path == old:
            upgrade(engine, MIGRATIONS_DIR, revision="0007_refusal_receipts")
            with engine.begin() as conn:  # what create_audit_log made before the guard
                conn.execute(sa.text("DROP TRIGGER audit_log_no_replace"))
        upgrade(engine, MIGRATIONS_DIR)
        engine.dispose()

    def schema(path: Path) -> list[tuple[str, str, str]]:
        with _shell(path) as conn:
            return conn.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
                "ORDER BY type, name"
            ).fetchall()

    assert schema(old) == schema(fresh)
    assert any(name == "audit_log_no_replace" for _, name, _ in schema(old))
