"""The agent gives up on a checkpoint that drips its answer, as on one that is down.

httpx's timeouts bound one socket operation each, so a checkpoint, or a proxy in front of
it, sending the status line and headers a byte at a time held the agent's run for as long
as it liked. Each attempt is bounded whole by ``AIRLOCK_AGENT_CHECKPOINT_TIMEOUT`` too
(:mod:`airlock.httpdeadline`), and one past it is retried with backoff like any other
transport error. The checkpoint (or the proxy) here is a fake on a real loopback socket
(tests/support/dripping.py); the agent is wired by ``build_agent`` from its settings, as
``airlock agent`` wires it. No scan runs: the cloud reader is never asked anything.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from airlock.settings import AgentSettings
from services.agent.client import HttpCheckpointClient
from services.agent.errors import CheckpointUnavailable
from services.agent.service import build_agent
from tests.executor.support import InMemoryCloud
from tests.support.dripping import DRIPPED_HEAD, GIVE_UP_SLACK_S, ok_json, serving_drips
from tests.support.tls import make_ca

ACCOUNT = "5123456789012345"
_EMPTY_PAGE = ok_json(b'{"items": [], "next_before": null}')
#: The deadline given up at, and all the room the answer in time that follows gets. That
#: one waits for the server, which takes connections in turn, to see the client has left
#: the dripping one (a drip or two), then for its own answer: a loaded runner has stalled
#: a process 3 s. Without the deadline the given-up attempt takes the whole 60 s drip.
_TIMEOUT_S = 5.0
_PROXY_VARIABLES = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
)


@pytest.fixture(autouse=True)
def _no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _settings(url: str, attempts: int, ca_file: Path | None = None) -> AgentSettings:
    return AgentSettings(
        AIRLOCK_ENV="dev",  # the alias of ``env``
        account=ACCOUNT,
        checkpoint_url=url,
        checkpoint_token="agent-token",
        checkpoint_ca_file=ca_file,
        checkpoint_timeout=_TIMEOUT_S,
        checkpoint_attempts=attempts,
        backoff_initial=0.5,
    )


def test_a_checkpoint_dripping_its_answers_is_given_up_at_each_deadline_and_retried() -> None:
    sleeps: list[float] = []
    with serving_drips([DRIPPED_HEAD, DRIPPED_HEAD, _EMPTY_PAGE]) as server:
        agent = build_agent(
            _settings(server.url, attempts=2), reader=InMemoryCloud(), sleep=sleeps.append
        )
        client = agent.client
        assert isinstance(client, HttpCheckpointClient)
        try:
            started = time.monotonic()
            with pytest.raises(CheckpointUnavailable, match=r"after 2 attempts \(ReadTimeout"):
                list(client.proposals(account=ACCOUNT, state="pending"))
            took = time.monotonic() - started
            assert 2 * _TIMEOUT_S <= took < 2 * _TIMEOUT_S + GIVE_UP_SLACK_S
            assert sleeps == [0.5]  # backed off between them, as for a checkpoint that is down
            # A checkpoint that answers in time is read as before, over the same client.
            assert list(client.proposals(account=ACCOUNT, state="pending")) == []
            assert sleeps == [0.5]
        finally:
            client.close()
    assert [r.split(b"?")[0] for r in server.requests] == [b"GET /v1/proposals"] * 3


def test_a_proxy_from_the_environment_dripping_its_answer_is_given_up_at_the_deadline_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent keeps httpx's ``trust_env``, so it follows ``HTTP_PROXY``: the deadline
    bounds the connection httpx's proxy pool makes as it does the direct one."""
    with serving_drips([DRIPPED_HEAD, _EMPTY_PAGE]) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        agent = build_agent(
            _settings("http://checkpoint.invalid", attempts=1),
            reader=InMemoryCloud(),
            sleep=lambda _: None,
        )
        client = agent.client
        assert isinstance(client, HttpCheckpointClient)
        try:
            started = time.monotonic()
            with pytest.raises(CheckpointUnavailable, match=r"after 1 attempts \(ReadTimeout"):
                list(client.proposals(account=ACCOUNT, state="pending"))
            took = time.monotonic() - started
            assert _TIMEOUT_S <= took < _TIMEOUT_S + GIVE_UP_SLACK_S
            assert list(client.proposals(account=ACCOUNT, state="pending")) == []
        finally:
            client.close()
    # A proxy is sent the whole URL: the requests went to it, not to the checkpoint's name.
    assert [r.split(b"?")[0] for r in proxy.requests] == [
        b"GET http://checkpoint.invalid/v1/proposals"
    ] * 2


def test_a_checkpoint_dripping_its_answer_over_tls_is_given_up_at_the_deadline_verified_as_ever(
    tmp_path: Path,
) -> None:
    """The deadline wraps the TLS stream too and changes nothing in what is trusted: a
    certificate of another CA is refused before the token goes out."""
    ca, other = make_ca(tmp_path / "pki", "ca"), make_ca(tmp_path / "other-pki", "other-ca")
    with serving_drips([DRIPPED_HEAD, _EMPTY_PAGE], tls=ca.issue("dripping")) as server:
        for trusted in (other, ca):
            agent = build_agent(
                _settings(server.url, attempts=1, ca_file=trusted.ca_file),
                reader=InMemoryCloud(),
                sleep=lambda _: None,
            )
            client = agent.client
            assert isinstance(client, HttpCheckpointClient)
            try:
                started = time.monotonic()
                with pytest.raises(CheckpointUnavailable) as caught:
                    list(client.proposals(account=ACCOUNT, state="pending"))
                took = time.monotonic() - started
                if trusted is other:
                    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
                    assert server.requests == []  # the token never went out
                    continue
                assert "ReadTimeout" in str(caught.value)
                assert _TIMEOUT_S <= took < _TIMEOUT_S + GIVE_UP_SLACK_S
                assert list(client.proposals(account=ACCOUNT, state="pending")) == []
            finally:
                client.close()
        assert server.handshakes_failed == 1
    assert [r.split(b"?")[0] for r in server.requests] == [b"GET /v1/proposals"] * 2
