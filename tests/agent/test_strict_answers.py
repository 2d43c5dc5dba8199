"""The agent reads the checkpoint's answers strictly (docs/protocol.md#strict-json), as the CLI and
the executor do: a duplicate key, NaN or Infinity is a checkpoint not speaking its API
(CheckpointUnavailable), never a value read last-wins. The checkpoint here is a fake on a
real loopback socket (tests/support/dripping.py); the agent is wired by ``build_agent``.
"""

from __future__ import annotations

import pytest

from services.agent.client import HttpCheckpointClient
from services.agent.errors import CheckpointUnavailable
from services.agent.service import build_agent
from tests.executor.support import InMemoryCloud
from tests.support.dripping import ok_json, serving_drips

from .test_checkpoint_deadline import ACCOUNT, _settings


def test_a_checkpoint_answer_with_a_duplicate_key_is_refused_not_read_last_wins() -> None:
    """Python's json keeps the last of duplicate keys: the agent read this withdrawal as
    ``executed`` (an executed stop makes an instance a candidate for delete,
    docs/architecture.md#staged-clean-up)."""
    duplicate = ok_json(b'{"id": "prop_x", "state": "withdrawn", "state": "executed"}')
    with serving_drips([duplicate]) as server:
        agent = build_agent(_settings(server.url, attempts=1), reader=InMemoryCloud())
        client = agent.client
        assert isinstance(client, HttpCheckpointClient)
        try:
            with pytest.raises(CheckpointUnavailable, match=r"malformed JSON.*duplicate"):
                client.withdraw("prop_x", "running again")
        finally:
            client.close()


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_checkpoint_answer_with_nan_or_infinity_is_refused(value: bytes) -> None:
    page = ok_json(b'{"items": [], "next_before": null, "total": ' + value + b"}")
    with serving_drips([page]) as server:
        agent = build_agent(_settings(server.url, attempts=1), reader=InMemoryCloud())
        client = agent.client
        assert isinstance(client, HttpCheckpointClient)
        try:
            with pytest.raises(CheckpointUnavailable, match="malformed JSON"):
                list(client.proposals(account=ACCOUNT, state="pending"))
        finally:
            client.close()


@pytest.mark.parametrize(
    "page",
    [
        # A record without its approval deadline: the agent would count an open proposal's
        # window from nothing.
        b'{"items": [{"id": "prop_x", "state": "pending"}], "next_before": null}',
        b'{"items": "prop_x", "next_before": null}',
        b'{"next_before": null}',
    ],
)
def test_a_page_that_is_not_the_api_is_refused_not_read_in_part(page: bytes) -> None:
    """Parsed once by the kernel's model (airlock.api.ProposalPage): a page the checkpoint
    would never send is a checkpoint not speaking its API, not a KeyError mid-run."""
    with serving_drips([ok_json(page)]) as server:
        agent = build_agent(_settings(server.url, attempts=1), reader=InMemoryCloud())
        client = agent.client
        assert isinstance(client, HttpCheckpointClient)
        try:
            with pytest.raises(CheckpointUnavailable, match=r"answered 200 with no ProposalPage"):
                list(client.proposals(account=ACCOUNT, state="pending"))
        finally:
            client.close()


def test_a_withdrawal_answered_without_a_record_is_refused() -> None:
    """The state the agent reports comes from the whole record, never a bare ``state``."""
    with serving_drips([ok_json(b'{"state": "withdrawn"}')]) as server:
        agent = build_agent(_settings(server.url, attempts=1), reader=InMemoryCloud())
        client = agent.client
        assert isinstance(client, HttpCheckpointClient)
        try:
            with pytest.raises(CheckpointUnavailable, match=r"answered 200 with no Proposal "):
                client.withdraw("prop_x", "running again")
        finally:
            client.close()
