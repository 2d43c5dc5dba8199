"""The executor reaches a checkpoint whose TLS certificate a private CA issued.

The checkpoint is the real one (tests/checkpoint/harness.py) with one approved proposal
on its feed, served by uvicorn over real TLS on 127.0.0.1 with a certificate from a
throwaway CA (tests/support/tls.py). The executor's feed source asks for the page
through :func:`checkpoint_client` as the daemon builds it: trusting certifi alone it
cannot verify the certificate (a transient failure: nothing recorded, the cursor stays),
trusting exactly the CA file of ``AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE`` it gets the page,
and a CA file of another CA, or a certificate of the right CA for another host, fails.
The client's connections go through the executor's deadline backend (a checkpoint that
drips its headers over TLS is given up on time) and verification is the same through it.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from airlock.protocol import canonical_bytes
from airlock.store import make_engine
from airlock.tls import CAFileError, checkpoint_verify
from services.executor import Backoff, CheckpointFeedSource, checkpoint_client, migrate
from services.executor.models import checkpoint_head, ledger, refusals, revocations
from tests.checkpoint.harness import World, make_world
from tests.support.dripping import DRIPPED_HEAD, GIVE_UP_SLACK_S, ok_json, serving_drips
from tests.support.tls import TestCA, make_ca, serving_tls

from .support import keyset

#: The grace after the feed's wait (0 here): the deadline given up at, and all the room
#: the page answered in time gets. That one waits for the server, which takes
#: connections in turn, to see the client has left the dripping one (a drip or two),
#: then for its own handshake and answer: 0.5 s was too little on a loaded runner.
_GRACE_S = 5.0


@dataclass
class TlsCheckpoint:
    world: World
    url: str
    ca: TestCA
    approval_id: str


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return make_ca(tmp_path / "pki", "private-ca")


@pytest.fixture
def tls_checkpoint(sqlite_url: str, tmp_path: Path, ca: TestCA) -> Iterator[TlsCheckpoint]:
    world = make_world(sqlite_url, tmp_path)
    proposal = world.submit().json()
    approved = world.approve("alice", proposal["id"], proposal["action_hash"]).json()
    assert approved["state"] == "approved", approved
    try:
        with serving_tls(world.app, ca.issue("checkpoint")) as url:
            yield TlsCheckpoint(world, url, ca, approved["approval"]["approval_id"])
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


@pytest.fixture
def ledger_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'executor.db'}")
    migrate(engine)
    yield engine
    engine.dispose()


def _receive(cp: TlsCheckpoint, engine: Engine, ca_file: Path | None) -> tuple[Any, ...]:
    """One ``receive`` of the feed source over a client built as the daemon builds it."""
    sleeps: list[float] = []
    with checkpoint_client(
        cp.url,
        cp.world.tokens["executor"],
        poll_wait_s=1,
        verify=checkpoint_verify(ca_file),
    ) as client:
        source = CheckpointFeedSource(
            engine=engine,
            client=client,
            clock=cp.world.clock,
            backoff=Backoff(),
            sleep=sleeps.append,
        )
        delivered = tuple(source.receive(wait_s=0))
        assert source.cursor() == 0  # nothing is acknowledged here
        # A failure is transient: waited out (the sleep is recorded, not slept), never raised.
        assert len(sleeps) == (0 if delivered else 1)
    return delivered


def _nothing_recorded(engine: Engine) -> None:
    with engine.connect() as conn:
        for table in (ledger, refusals, revocations, checkpoint_head):
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one() == 0


def test_with_the_private_ca_file_the_feed_page_is_fetched(
    tls_checkpoint: TlsCheckpoint, ledger_engine: Engine
) -> None:
    [delivery] = _receive(tls_checkpoint, ledger_engine, tls_checkpoint.ca.ca_file)
    statement = json.loads(base64.b64decode(json.loads(delivery.raw)["envelope"]["payload"]))
    assert statement["approval_id"] == tls_checkpoint.approval_id


def test_without_the_ca_file_certifi_refuses_the_private_certificate_and_nothing_is_recorded(
    tls_checkpoint: TlsCheckpoint, ledger_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    assert _receive(tls_checkpoint, ledger_engine, None) == ()
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
    _nothing_recorded(ledger_engine)


def test_a_ca_file_of_another_ca_is_refused_and_nothing_is_recorded(
    tls_checkpoint: TlsCheckpoint,
    ledger_engine: Engine,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = make_ca(tmp_path / "other-pki", "other-ca")
    assert _receive(tls_checkpoint, ledger_engine, other.ca_file) == ()
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
    _nothing_recorded(ledger_engine)


def test_a_certificate_of_the_private_ca_for_another_host_is_refused(
    sqlite_url: str,
    tmp_path: Path,
    ca: TestCA,
    ledger_engine: Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The CA file replaces the trust anchors only: host names are still checked."""
    world = make_world(sqlite_url, tmp_path)
    elsewhere = ca.issue("elsewhere", ips=(), dns=("checkpoint.internal.example",))
    try:
        with serving_tls(world.app, elsewhere) as url:
            cp = TlsCheckpoint(world, url, ca, approval_id="")
            assert _receive(cp, ledger_engine, ca.ca_file) == ()
    finally:
        world.client.close()
        world.checkpoint.db.dispose()
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text and "IP address mismatch" in caplog.text
    _nothing_recorded(ledger_engine)


def test_a_checkpoint_dripping_its_headers_over_tls_is_given_up_at_the_deadline_verified_as_ever(
    ca: TestCA,
    ledger_engine: Engine,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The deadline's network backend wraps the TLS stream too, and changes nothing in
    what is trusted: another CA's context is still refused before any request is sent."""
    answers = [DRIPPED_HEAD, ok_json(b'{"items": [], "cursor": 0}')]
    other = make_ca(tmp_path / "other-pki", "other-ca")
    with serving_drips(answers, tls=ca.issue("dripping")) as server:
        for trusted in (other, ca):
            sleeps: list[float] = []
            with checkpoint_client(
                server.url, "t", poll_wait_s=1, verify=checkpoint_verify(trusted.ca_file)
            ) as client:
                source = CheckpointFeedSource(
                    engine=ledger_engine,
                    client=client,
                    clock=lambda: int(time.time()),
                    backoff=Backoff(rng=lambda: 1.0),
                    sleep=sleeps.append,
                    monotonic=lambda: 0.0,  # the body deadline on this clock never passes
                    page_grace_s=_GRACE_S,
                )
                started = time.monotonic()
                assert source.receive(wait_s=0) == ()
                took = time.monotonic() - started
                assert sleeps == [0.5]
                if trusted is other:
                    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text
                    assert server.requests == []  # the token never went out
                    continue
                # The grace (the wait asked for was 0); the whole 60 s drip without it.
                assert _GRACE_S <= took < _GRACE_S + GIVE_UP_SLACK_S
                assert source.receive(wait_s=0) == ()  # answered in time, same client
                assert sleeps == [0.5]  # no failure this time
        # The server takes connections in turn: it saw the first one fail before the others.
        assert server.handshakes_failed == 1
        assert len(server.requests) == 2
    _nothing_recorded(ledger_engine)


def test_verification_cannot_be_turned_off() -> None:
    with pytest.raises(TypeError, match="verification stays on"):
        checkpoint_client("https://127.0.0.1:9", "t", poll_wait_s=1, verify=False)  # type: ignore[arg-type]


def test_a_ca_file_that_is_not_pem_is_refused_when_the_client_is_built(tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate\n")
    with pytest.raises(CAFileError, match="not a PEM CA bundle"):
        checkpoint_verify(bogus)


# ---------------------------------------------------------------------------- the daemon


def _executor_env(tmp_path: Path, url: str, token: str, ca_file: Path | None) -> dict[str, str]:
    from devstack.ports import free_port

    trusted = tmp_path / "trusted.json"
    # Not the checkpoint's key: its approval is refused (E_UNKNOWN_KEY) before any cloud
    # call, so the run shows the page was fetched and writes nothing anywhere.
    trusted.write_bytes(canonical_bytes(keyset().to_value()))
    env = {
        "AIRLOCK_ENV": "dev",
        "AIRLOCK_EXECUTOR_DATABASE_URL": f"sqlite:///{tmp_path / 'daemon.db'}",
        "AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH": str(trusted),
        "AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH": str(tmp_path / "receipt.pem"),
        "AIRLOCK_EXECUTOR_CLOUD_ENDPOINT": f"127.0.0.1:{free_port()}",  # nothing listens
        "AIRLOCK_EXECUTOR_CHECKPOINT_URL": url,
        "AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN": token,
        "AIRLOCK_EXECUTOR_RETRY_MAX": "1",
    }
    if ca_file is not None:
        env["AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE"] = str(ca_file)
    return env


@pytest.mark.parametrize("with_ca_file", [True, False], ids=["ca-file", "certifi-only"])
def test_executor_once_reads_the_feed_over_the_private_ca_only_with_its_ca_file(
    tls_checkpoint: TlsCheckpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    with_ca_file: bool,
) -> None:
    from typer.testing import CliRunner

    from airlock.cli import app

    monkeypatch.chdir(tmp_path)  # no stray .env
    ca_file = tls_checkpoint.ca.ca_file if with_ca_file else None
    env = _executor_env(
        tmp_path, tls_checkpoint.url, tls_checkpoint.world.tokens["executor"], ca_file
    )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    assert runner.invoke(app, ["executor", "keygen"]).exit_code == 0
    once = runner.invoke(app, ["executor", "--once"])
    assert once.exit_code == 0, once.output
    # The approval on the page is refused unverified (its id is not shown, it is not
    # authenticated), which it can only be if the page arrived.
    assert ("refused E_UNKNOWN_KEY" in once.output) is with_ca_file, once.output


def test_executor_with_a_missing_ca_file_refuses_to_start_naming_the_variable_and_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from airlock.cli import app

    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "no-such-ca.pem"
    for name, value in _executor_env(tmp_path, "https://127.0.0.1:9", "t", missing).items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["executor", "--once"])
    assert result.exit_code == 2, result.output
    assert f"AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE={missing}" in result.output
    assert "cannot be read" in result.output
    assert not (tmp_path / "daemon.db").exists()  # stopped before anything was opened


def test_a_ca_file_next_to_an_http_url_is_refused_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca: TestCA
) -> None:
    """A CA file next to an http URL would never be used: refused, not ignored."""
    from typer.testing import CliRunner

    from airlock.cli import app

    monkeypatch.chdir(tmp_path)
    for name, value in _executor_env(tmp_path, "http://127.0.0.1:9", "t", ca.ca_file).items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["executor", "--once"])
    assert result.exit_code == 2, result.output
    assert "AIRLOCK_EXECUTOR_CHECKPOINT_URL is not an https URL" in result.output


def test_httpx_would_honour_ssl_cert_file_but_the_executor_client_does_not(
    tls_checkpoint: TlsCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trust_env=False is kept: the CA comes from the executor's own setting, never from
    SSL_CERT_FILE (which would also bring the environment's proxies along)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_checkpoint.ca.ca_file))
    with httpx.Client(timeout=10.0) as ambient:
        assert ambient.get(f"{tls_checkpoint.url}/healthz").status_code == 200
    with (
        checkpoint_client(tls_checkpoint.url, "t", poll_wait_s=1) as client,
        pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get("/healthz")
