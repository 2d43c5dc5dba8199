"""airlock.apiclient: the one client core every client of the checkpoint wraps.

Over httpx's mock transport (no socket): the strict answer, the error mapping, the
capped body, a transport error as unavailability; and each client's errors are the
core's, so a caller can catch any of them as ``ApiError``. The deadline on the wire is
tested with real sockets in tests/test_httpdeadline.py and each client's own tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from airlock import apiclient
from airlock.cli import _client as cli_client
from services.agent import errors as agent_errors
from webapp import errors as webapp_errors


def _http(answer: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    return apiclient.checkpoint_http(
        "http://checkpoint.test", timeout=5.0, transport=httpx.MockTransport(answer)
    )


def _answer(status: int, body: bytes) -> apiclient.Answer:
    with _http(lambda request: httpx.Response(status, content=body)) as http:
        return apiclient.exchange(http, "GET", "/v1/proposals", deadline_s=5.0)


def test_a_duplicate_key_in_an_answer_is_not_strict_json() -> None:
    answer = _answer(200, b'{"state": "rejected", "state": "approved"}')
    with pytest.raises(apiclient.NotStrictJSON) as caught:
        answer.json()
    assert caught.value.code == "E_PARSE" and "duplicate" in caught.value.detail


def test_the_api_error_body_is_one_refusal_with_its_status() -> None:
    body = json.dumps({"error": {"code": "E_STATE", "message": "no longer pending"}}).encode()
    refused = _answer(409, body).refusal()
    assert isinstance(refused, apiclient.CheckpointRefused)
    assert (refused.code, refused.message, refused.status) == ("E_STATE", "no longer pending", 409)
    assert str(refused) == "E_STATE: no longer pending"


@pytest.mark.parametrize(
    "body",
    [
        b"<html>bad gateway</html>",
        b'{"error": "E_STATE"}',
        b'{"error": {"code": 7, "message": "x"}}',
        b'{"error": {"code": "E_STATE"}}',
        b'{"error": {"code": "E_A", "message": "x"}, "error": {"code": "E_B", "message": "y"}}',
    ],
)
def test_an_error_body_that_is_not_the_apis_is_no_refusal(body: bytes) -> None:
    assert _answer(502, body).refusal() is None


def test_an_error_code_fit_to_store_or_the_status() -> None:
    assert _answer(409, b'{"error": {"code": "E_STATE", "message": ""}}').error_code() == "E_STATE"
    for hostile in ("E_\x1b[31m", "E_\x00", "E_" + "X" * 80):
        body = json.dumps({"error": {"code": hostile, "message": ""}}).encode()
        assert _answer(409, body).error_code() == "HTTP 409"
    assert _answer(503, b"down").error_code() == "HTTP 503"


def test_an_answer_over_the_cap_is_cut_not_read_whole() -> None:
    with _http(lambda request: httpx.Response(200, content=b"x" * 5000)) as http:
        answer = apiclient.exchange(http, "GET", "/v1/feed", deadline_s=5.0, max_bytes=100)
    assert answer.cut and answer.body == b"x" * 100


def test_no_answer_is_the_checkpoint_unavailable_with_httpxs_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with _http(refuse) as http, pytest.raises(apiclient.CheckpointUnavailable) as caught:
        apiclient.exchange(http, "GET", "/v1/me", deadline_s=5.0)
    assert isinstance(caught.value.cause, httpx.ConnectError)
    assert str(caught.value) == "ConnectError: connection refused"


def test_a_redirect_is_never_followed_with_the_token() -> None:
    seen: list[str] = []

    def redirect(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"Location": "https://elsewhere.test/steal"})

    with _http(redirect) as http:
        answer = apiclient.exchange(
            http, "GET", "/v1/me", deadline_s=5.0, headers={"Authorization": "Bearer t"}
        )
    assert answer.status == 302 and seen == ["http://checkpoint.test/v1/me"]


def test_tls_verification_cannot_be_turned_off() -> None:
    with pytest.raises(TypeError, match="verification stays on"):
        apiclient.checkpoint_http("https://checkpoint.test", verify=False, timeout=5.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("refused", "unavailable"),
    [
        (cli_client.CheckpointRefused("E_STATE", "m", 409), cli_client.CheckpointUnavailable("x")),
        (
            webapp_errors.CheckpointRefused("E_STATE", "m", 409),
            webapp_errors.CheckpointUnavailable("x"),
        ),
        (
            agent_errors.CheckpointRefused(409, "E_STATE", "m"),
            agent_errors.CheckpointUnavailable("x"),
        ),
    ],
    ids=["cli", "webapp", "agent"],
)
def test_every_clients_errors_are_the_cores(refused: Exception, unavailable: Exception) -> None:
    assert isinstance(refused, apiclient.CheckpointRefused)
    assert isinstance(unavailable, apiclient.CheckpointUnavailable)
    assert (refused.code, refused.message, refused.status) == ("E_STATE", "m", 409)
