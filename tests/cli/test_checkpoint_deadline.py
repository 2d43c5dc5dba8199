"""The CLI's commands for people give up on a checkpoint that drips its answer (exit 3).

httpx's timeouts bound one socket operation each, so a checkpoint, or a proxy in front of
it, sending the status line and headers a byte at a time held ``airlock approvals …`` for
as long as it liked. Each call is bounded whole too (:mod:`airlock.httpdeadline`); the
deadline is cut here to a second, the timeout per read stays the CLI's 15 s. The
checkpoint is a fake on a real loopback socket (tests/support/dripping.py).
"""

from __future__ import annotations

import time

import pytest

from airlock.cli import _client
from tests.support.dripping import DRIPPED_HEAD, GIVE_UP_SLACK_S, ok_json, serving_drips

from .conftest import airlock

_DEADLINE_S = 1.0


def test_a_checkpoint_dripping_its_answer_is_given_up_at_the_deadline_and_exits_3(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own = _client._DEADLINE_S
    monkeypatch.setattr(_client, "_DEADLINE_S", _DEADLINE_S)
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)  # the CLI follows them: not to this test
    answers = [DRIPPED_HEAD, ok_json(b'{"items": [], "next_before": null}')]
    with serving_drips(answers) as server:
        env = {"AIRLOCK_TOKEN": "x" * 40, "AIRLOCK_CHECKPOINT_URL": server.url}
        started = time.monotonic()
        listing = airlock("approvals", "list", env=env)
        took = time.monotonic() - started
        assert listing.exit_code == 3, listing.output
        assert "cannot reach the checkpoint" in listing.stderr
        assert _DEADLINE_S <= took < _DEADLINE_S + GIVE_UP_SLACK_S
        # A checkpoint that answers in time is listed as before, within the CLI's own
        # deadline: the server, taking connections in turn, answers once it sees the
        # first client has left (a drip or two), and a loaded runner has stalled a
        # process 3 s, more than the 1 s above.
        monkeypatch.setattr(_client, "_DEADLINE_S", own)
        listing = airlock("approvals", "list", env=env)
        assert listing.exit_code == 0, listing.output
    assert [r.split(b"?")[0] for r in server.requests] == [b"GET /v1/proposals"] * 2
