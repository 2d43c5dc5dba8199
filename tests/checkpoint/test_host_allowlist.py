"""A request whose Host names none of the checkpoint's names is refused 400 E_HOST: a
page on evil.example resolving to 127.0.0.1 (DNS rebinding) must not read the API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from airlock.asgi import host_name
from airlock.protocol import canonical_bytes
from airlock.settings import CheckpointSettings
from services.checkpoint.app import build, create_app
from services.checkpoint.keys import KeyDirectory
from tests.executor.support import receipt_keyset

from .harness import World


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8787", "127.0.0.1.evil.example"])
def test_dns_rebinding_host_is_refused(sqlite_world: World, host: str) -> None:
    world = sqlite_world
    response = world.client.get("/v1/me", headers={**world.auth("alice"), "Host": host})
    assert response.status_code == 400
    assert response.json() == {"error": {"code": "E_HOST", "message": "unknown Host"}}
    assert world.app.state.refusals.pending() == 0  # nothing reached the API


def test_loopback_names_are_answered_by_default(sqlite_world: World) -> None:
    world = sqlite_world
    app = create_app(world.checkpoint, world.accounts)
    client = TestClient(app)
    for host in ("localhost:8787", "127.0.0.1", "[::1]:8787", "LOCALHOST"):
        assert client.get("/healthz", headers={"Host": host}).status_code == 200, host
    for host in ("testserver", "", "[::1", "localhost:x", "evil.example"):
        assert client.get("/healthz", headers={"Host": host}).status_code == 400, host


def test_the_configured_names_and_the_listen_address_are_answered(tmp_path: Path) -> None:
    KeyDirectory(tmp_path / "keys").generate(0)
    receipt_keys = tmp_path / "receipt-keys.json"
    receipt_keys.write_bytes(canonical_bytes(receipt_keyset().to_value()))
    settings = CheckpointSettings.model_validate(
        {
            "database_url": f"sqlite:///{tmp_path / 'c.db'}",
            "keys_dir": tmp_path / "keys",
            "receipt_keys_path": receipt_keys,
            "audience": "airlock-executor/test",
            "allowed_hosts": "checkpoint,localhost",
            "host": "10.1.2.3",
        }
    )
    app = build(settings, sweep_interval=None)
    try:
        client = TestClient(app)
        for host in ("checkpoint:8787", "localhost", "10.1.2.3:8787"):
            assert client.get("/healthz", headers={"Host": host}).status_code == 200, host
        for host in ("127.0.0.1", "evil.example"):
            assert client.get("/healthz", headers={"Host": host}).status_code == 400, host
    finally:
        app.state.checkpoint.db.dispose()


def test_a_client_using_the_configured_url_gets_through(sqlite_world: World) -> None:
    # What the executor and the agent do: httpx sends the URL's host[:port] as Host.
    world = sqlite_world
    transport = httpx.ASGITransport(app=world.app)

    async def me() -> int:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8787", headers=world.auth("executor")
        ) as client:
            return (await client.get("/v1/me")).status_code

    assert asyncio.run(me()) == 200


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("Example.COM", "example.com"),
        ("example.com:443", "example.com"),
        ("[::1]:80", "::1"),
        ("[::1]", "::1"),
        ("::1", None),
        ("example.com:", None),
        ("example.com:80:80", None),
        ("exa mple", None),
        ("[::1]x", None),
        ("", None),
        ("ex\u00e4mple.com", None),
    ],
)
def test_host_names_are_read_as_rfc_9110_says(value: str, name: str | None) -> None:
    assert host_name(value) == name
