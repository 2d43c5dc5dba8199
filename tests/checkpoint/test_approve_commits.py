"""An HTTP approve is at most one commit (issue 25): the vote, the signed approval, its
audit events, its feed entry (and the replicas' NOTIFY), its notification outbox rows and
the session's last use all commit together. A second commit on this path fails here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from services.checkpoint.models import sessions, votes

from .harness import World

#: auth._TOUCH_EVERY: past it, a use of the session is due to be written.
_TOUCH_DUE = 61


@contextmanager
def _commits(engine: sa.Engine) -> Iterator[list[int]]:
    """Counts the commits on ``engine`` (any thread) while the block runs."""
    seen: list[int] = []

    def committed(_conn: sa.Connection) -> None:
        seen.append(1)

    sa.event.listen(engine, "commit", committed)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "commit", committed)


def _last_seen(world: World, who: str) -> int:
    with world.checkpoint.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sessions.c.last_seen_at).where(sessions.c.username == who)
            ).scalar_one()
        )


@pytest.mark.parametrize("touch_due", [False, True], ids=["session-fresh", "session-touch-due"])
def test_an_approve_that_issues_is_one_commit(world: World, touch_due: bool) -> None:
    proposal = world.submit().json()
    if touch_due:
        world.clock.advance(_TOUCH_DUE)
    with _commits(world.checkpoint.engine) as seen:
        record = world.approve("alice", proposal["id"], proposal["action_hash"])
    assert record.status_code == 200 and record.json()["state"] == "approved", record.text
    assert len(seen) == 1
    # The session's last use went into that one commit.
    assert _last_seen(world, "alice") == world.clock()


def test_a_vote_short_of_quorum_is_one_commit(world: World) -> None:
    proposal = world.submit(operation="delete").json()  # two people, each typing the id
    world.clock.advance(_TOUCH_DUE)
    with _commits(world.checkpoint.engine) as seen:
        record = world.approve(
            "alice", proposal["id"], proposal["action_hash"], confirm="i-t4n0example"
        )
    assert record.status_code == 200 and record.json()["state"] == "pending", record.text
    assert len(seen) == 1
    assert _last_seen(world, "alice") == world.clock()


def test_a_refused_vote_still_counts_as_use_of_the_session(world: World) -> None:
    proposal = world.submit().json()
    world.clock.advance(_TOUCH_DUE)
    refused = world.approve("alice", proposal["id"], "sha256:" + "0" * 64)
    assert refused.json()["error"]["code"] == "E_STALE_VIEW"
    assert _last_seen(world, "alice") == world.clock()
    with world.checkpoint.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(votes)).scalar_one() == 0
