"""The checkpoint goes away mid-run: the agent retries with bounded backoff and never
duplicates a proposal, even when a submit landed and only its answer was lost."""

from __future__ import annotations

import httpx
import pytest

from services.agent.errors import CheckpointUnavailable

from .conftest import Harness


class FlakyCheckpoint(httpx.BaseTransport):
    """In front of the real checkpoint app: refuse connections, or apply then drop."""

    def __init__(self, inner: httpx.Client) -> None:
        self.inner = inner
        self.refuse_next = 0
        self.drop_next_submits = 0  # forwarded (the proposal is recorded), then a timeout
        self.fail_503_next = 0
        self.submits_forwarded = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.refuse_next:
            self.refuse_next -= 1
            raise httpx.ConnectError("connection refused", request=request)
        if self.fail_503_next:
            self.fail_503_next -= 1
            return httpx.Response(503, json={"error": {"code": "E_UNAVAILABLE", "message": ""}})
        upstream = self.inner.send(
            self.inner.build_request(
                request.method,
                request.url.path,
                params=request.url.params,
                headers=request.headers,
                content=request.read(),
            )
        )
        is_submit = request.method == "POST" and request.url.path == "/v1/proposals"
        if is_submit:
            self.submits_forwarded += 1
            if self.drop_next_submits:
                self.drop_next_submits -= 1
                raise httpx.ReadTimeout("answer lost", request=request)
        return httpx.Response(
            upstream.status_code, headers=upstream.headers, content=upstream.content
        )


def _client(harness: Harness, flaky: FlakyCheckpoint, attempts: int = 6) -> httpx.Client:
    # checkpoint.test: a name the harness checkpoint answers to (its Host allowlist).
    return httpx.Client(base_url="http://checkpoint.test", transport=flaky)


def test_checkpoint_down_retries_then_succeeds_without_duplicates(harness: Harness) -> None:
    flaky = FlakyCheckpoint(harness.world.client)
    flaky.refuse_next = 3  # down when the run starts
    flaky.drop_next_submits = 2  # the first submit lands, then its first retry too: answers lost
    http = _client(harness, flaky)
    agent = harness.agent(client=harness.client(http=http))

    report = agent.run_once()

    expected = {i for i, c in harness.dc.admin.truth().items() if c == "idle"}
    proposals = harness.proposals()
    assert {p["resource_id"] for p in proposals} == expected
    assert len(proposals) == len(expected)  # each once
    # the lost answers were retried with the same bytes: 200 with the existing record
    assert report.created == len(expected) - 1 and report.existing == 1
    assert flaky.submits_forwarded == len(expected) + 2
    # bounded exponential backoff, per request: 0.5, 1, 2 while down; 0.5, 1 for the submit
    assert harness.sleeps == [0.5, 1.0, 2.0, 0.5, 1.0]


def test_5xx_is_retried_and_backoff_is_capped(harness: Harness) -> None:
    flaky = FlakyCheckpoint(harness.world.client)
    flaky.fail_503_next = 5
    client = harness.client(http=_client(harness, flaky))
    client._backoff_max = 1.5  # the cap under test
    agent = harness.agent(client=client)

    report = agent.run_once()

    assert report.complete and report.created > 0
    assert harness.sleeps == [0.5, 1.0, 1.5, 1.5, 1.5]


def test_checkpoint_that_stays_down_ends_the_run_having_submitted_nothing(
    harness: Harness,
) -> None:
    flaky = FlakyCheckpoint(harness.world.client)
    flaky.refuse_next = 10**6
    agent = harness.agent(client=harness.client(http=_client(harness, flaky), attempts=4))

    with pytest.raises(CheckpointUnavailable, match="after 4 attempts"):
        agent.run_once()

    assert harness.sleeps == [0.5, 1.0, 2.0]
    assert flaky.submits_forwarded == 0 and harness.proposals() == []
