"""A feed long-poll is authorised for each answer it gives, not only when it began.

An executor's token revoked (or a reader's session ended) while its long-poll waits must
not receive the approval issued a moment later. The server runs in a thread of this
process; the poll is known to be waiting because it is registered on the feed signal, and
the approval that wakes it is issued through the API. No sleeps: each wait is a
deadline-bounded poll of a condition.
"""

from __future__ import annotations

from pathlib import Path

from tests.checkpoint.harness import approved, audit_events, long_poll, make_world, served

_DEADLINE = 20.0


def test_a_token_revoked_during_its_long_poll_gets_no_bundle(
    sqlite_url: str, tmp_path: Path
) -> None:
    world = make_world(sqlite_url, tmp_path)
    world.app.state.feed_max_wait = 60  # the poll must not end by itself within the test
    with served(world.app) as (_server, port, _serving):
        polling, answer = long_poll(world, port, wait=60)
        world.accounts.revoke_service_token("executor-1")
        _, approval_id = approved(world)  # wakes the waiting poll at once
        polling.join(_DEADLINE)
        assert not polling.is_alive()

    assert answer.get("status") == 401, answer
    assert answer["body"]["error"]["code"] == "E_UNAUTHENTICATED"
    assert approval_id not in str(answer["body"])
    # The token still answers nothing afterwards, and the bundle is there for a valid one.
    assert world.client.get("/v1/feed", headers=world.auth("executor")).status_code == 401
    token = world.accounts.create_service_token("executor-2", "executor")
    page = world.client.get("/v1/feed", headers={"Authorization": f"Bearer {token}"}).json()
    assert [item["approval_id"] for item in page["items"]] == [approval_id]
    assert audit_events(world, "checkpoint.token.revoked")
    refused = [(e["code"], e["by"]) for e in audit_events(world, "checkpoint.refused")]
    assert refused == [("E_UNAUTHENTICATED", "executor-1")]  # the poll's, by whom it began


def test_a_long_poll_that_stays_authorised_still_gets_the_bundle(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The re-check costs the valid poll nothing: it is woken and answered as before."""
    world = make_world(sqlite_url, tmp_path)
    world.app.state.feed_max_wait = 60
    with served(world.app) as (_server, port, _serving):
        polling, answer = long_poll(world, port, wait=60)
        _, approval_id = approved(world)
        polling.join(_DEADLINE)
        assert not polling.is_alive()

    assert answer.get("status") == 200, answer
    assert [item["approval_id"] for item in answer["body"]["items"]] == [approval_id]
