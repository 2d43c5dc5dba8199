"""The web app reads the checkpoint's answers strictly (docs/protocol.md#strict-json), as the CLI,
the agent and the executor do: a duplicate key, NaN or Infinity is a checkpoint not speaking its API
(CheckpointUnavailable, the page says so), never a value read last-wins that a person
then decides on. The checkpoint here answers through httpx's MockTransport: what is
tested is the client's reading of the bytes, not the socket."""

from __future__ import annotations

import httpx
import pytest

from webapp.client import CheckpointClient
from webapp.errors import CheckpointUnavailable


def _client(body: bytes, status: int = 200) -> CheckpointClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"Content-Type": "application/json"})

    return CheckpointClient("http://checkpoint.test", transport=httpx.MockTransport(answer))


def test_a_checkpoint_answer_with_a_duplicate_key_is_refused_not_read_last_wins() -> None:
    """``{"keys": [], "keys": [...]}``: httpx's json() read the second list."""
    body = b'{"keys": [], "keys": [{"kid": "ed25519:00", "status": "active"}]}'
    with pytest.raises(CheckpointUnavailable, match=r"without strict JSON \(E_PARSE\)"):
        _client(body).keys()


def test_a_refusal_with_a_duplicate_code_is_refused_not_read_last_wins() -> None:
    body = b'{"error": {"code": "E_STATE", "message": "not pending", "code": "E_HARMLESS"}}'
    with pytest.raises(CheckpointUnavailable, match="without strict JSON"):
        _client(body, status=409).keys()


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_checkpoint_answer_with_nan_or_infinity_is_refused(value: bytes) -> None:
    with pytest.raises(CheckpointUnavailable, match="without strict JSON"):
        _client(b'{"keys": [], "n": ' + value + b"}").keys()


def test_a_strict_answer_is_still_read() -> None:
    assert _client(b'{"keys": []}').keys() == []
