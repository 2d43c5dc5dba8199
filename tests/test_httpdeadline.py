"""``with_deadlines`` wraps only the network backend under the pools httpx built.

What the deadline does on a socket is shown end to end by the drip tests of each client
(grep "dripping" under tests/); these pin what it must leave alone and what it refuses.
"""

from __future__ import annotations

import httpcore
import httpx
import pytest

from airlock.httpdeadline import DeadlineBackend, with_deadlines


def _pools(client: httpx.Client) -> list[httpcore.ConnectionPool]:
    transports = [client._transport, *client._mounts.values()]
    return [t._pool for t in transports if isinstance(t, httpx.HTTPTransport)]


def test_every_pool_keeps_its_tls_context_and_proxy_and_gets_the_deadline_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with httpx.Client(base_url="https://checkpoint.invalid") as client:
        before = [(type(p), p._ssl_context) for p in _pools(client)]
        assert httpcore.HTTPProxy in {kind for kind, _ in before}  # the environment's proxy
        assert with_deadlines(client) is client
        pools = _pools(client)
        assert [(type(p), p._ssl_context) for p in pools] == before
        assert all(isinstance(p._network_backend, DeadlineBackend) for p in pools)


def test_a_client_around_another_transport_is_refused_not_left_unbounded() -> None:
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    with (
        httpx.Client(transport=mock) as client,
        pytest.raises(RuntimeError, match="not httpx's transport"),
    ):
        with_deadlines(client)


def test_a_client_wrapped_twice_is_refused() -> None:
    with httpx.Client() as client:
        with_deadlines(client)
        with pytest.raises(RuntimeError, match="not a fresh one"):
            with_deadlines(client)
