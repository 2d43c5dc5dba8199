"""Attacks on the checkpoint's HTTP surface itself, as real requests against the real app.

Each test is named after the attack; each refusal is checked for its stable code and for
having changed nothing. The approval rules have their own tests (test_api_rules.py).
"""

from __future__ import annotations

from typing import Any

from tests.support.asgi import stream_body

from .harness import PASSWORD, World

CAP = 128 * 1024  # services/checkpoint/routes.py: _BODY_MAX_BYTES


def _error(response: Any) -> tuple[int, str]:
    return response.status_code, str(response.json()["error"]["code"])


def test_an_oversized_login_body_is_refused_before_it_is_read(sqlite_world: World) -> None:
    world = sqlite_world
    body = b'{"username": "alice", "password": "' + b"x" * CAP + b'"}'
    response = world.client.post(
        "/v1/sessions", content=body, headers={"Content-Type": "application/json"}
    )
    assert _error(response) == (413, "E_INVALID")
    # A body under the cap is still read and judged as before.
    response = world.client.post(
        "/v1/sessions", json={"username": "alice", "password": "x" * (CAP // 2)}
    )
    assert _error(response) == (422, "E_INVALID")
    ok = world.client.post("/v1/sessions", json={"username": "alice", "password": PASSWORD})
    assert ok.status_code == 201


def test_an_endless_unauthenticated_body_is_read_no_further_than_the_cap(
    sqlite_world: World,
) -> None:
    # No Content-Length: the cap must hold on the bytes actually received. Without it the
    # app reads all of them (here 8 MiB; an attacker sends more) before refusing anything.
    chunk = 16 * 1024
    for path in ("/v1/sessions", "/v1/outcomes", "/v1/proposals/prop_test0000001/approve"):
        status, read = stream_body(
            sqlite_world.app,
            path,
            total=8 * 1024 * 1024,
            chunk=chunk,
            headers=[(b"content-type", b"application/json")],
        )
        assert status == 413, path
        assert read <= CAP + chunk, (path, read)


def test_an_oversized_proposal_is_refused_and_records_nothing(sqlite_world: World) -> None:
    world = sqlite_world
    status, read = stream_body(
        world.app,
        "/v1/proposals",
        total=4 * 1024 * 1024,
        headers=[(b"authorization", f"Bearer {world.tokens['agent']}".encode())],
    )
    assert status == 413 and read <= CAP + 16 * 1024
    listed = world.client.get("/v1/proposals", headers=world.auth("viewer")).json()
    assert listed["items"] == []
