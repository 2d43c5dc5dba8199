"""The agent reaches a checkpoint whose TLS certificate a private CA issued.

The agent's client keeps httpx's ``trust_env`` (as before): with no CA file of its own it
trusts certifi's bundle or the file ``SSL_CERT_FILE`` names. ``AIRLOCK_AGENT_CHECKPOINT_CA_FILE``
makes it trust exactly that file, whatever ``SSL_CERT_FILE`` says. The checkpoint is the
real one, served over real TLS on 127.0.0.1 (tests/support/tls.py); the agent is wired
by ``build_agent`` from its settings, as ``airlock agent`` wires it. No scan runs: the
cloud reader is an in-memory double that is never asked anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from airlock.settings import AgentSettings
from services.agent.errors import CheckpointUnavailable, ConfigError
from services.agent.service import Agent, build_agent
from tests.executor.support import InMemoryCloud
from tests.support import tls
from tests.support.tls import TlsCheckpoint, make_ca

ACCOUNT = "5123456789012345"


@pytest.fixture
def tls_checkpoint(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TlsCheckpoint]:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with tls.tls_checkpoint(sqlite_url, tmp_path) as cp:
        yield cp


def _settings(cp: TlsCheckpoint, ca_file: Path | None) -> AgentSettings:
    return AgentSettings(
        AIRLOCK_ENV="dev",  # type: ignore[call-arg]  # the alias of ``env``
        account=ACCOUNT,
        checkpoint_url=cp.url,
        checkpoint_token=cp.world.tokens["agent"],
        checkpoint_ca_file=ca_file,
        checkpoint_attempts=1,
    )


def _build(settings: AgentSettings) -> Agent:
    return build_agent(settings, reader=InMemoryCloud(), sleep=lambda _: None)


def _agent(cp: TlsCheckpoint, ca_file: Path | None) -> Agent:
    return _build(_settings(cp, ca_file))


def _reads_the_checkpoint(agent: Agent) -> bool:
    assert agent.client is not None
    try:
        list(agent.client.proposals(account=ACCOUNT, state="pending"))
    except CheckpointUnavailable as exc:
        assert "CERTIFICATE_VERIFY_FAILED" in str(exc)
        return False
    finally:
        agent.client.close()
    return True


def test_with_its_ca_file_the_agent_reads_the_checkpoint(tls_checkpoint: TlsCheckpoint) -> None:
    assert _reads_the_checkpoint(_agent(tls_checkpoint, tls_checkpoint.ca.ca_file))


def test_without_a_ca_file_the_private_certificate_is_refused(
    tls_checkpoint: TlsCheckpoint,
) -> None:
    assert not _reads_the_checkpoint(_agent(tls_checkpoint, None))


def test_without_a_ca_file_the_agent_still_honours_ssl_cert_file(
    tls_checkpoint: TlsCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_checkpoint.ca.ca_file))
    assert _reads_the_checkpoint(_agent(tls_checkpoint, None))


def test_a_ca_file_of_another_ca_is_used_alone_whatever_ssl_cert_file_says(
    tls_checkpoint: TlsCheckpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_checkpoint.ca.ca_file))
    other = make_ca(tmp_path / "other-pki", "other-ca")
    assert not _reads_the_checkpoint(_agent(tls_checkpoint, other.ca_file))


def test_a_bad_ca_file_is_a_settings_error_naming_the_variable_and_the_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ca.pem"
    path.write_bytes(b"\x30\x82\x01\x0a")  # DER-looking bytes, not PEM
    with pytest.raises(ValidationError) as caught:
        AgentSettings(
            AIRLOCK_ENV="dev",  # type: ignore[call-arg]
            checkpoint_url="https://checkpoint.internal",
            checkpoint_ca_file=path,
        )
    message = caught.value.errors()[0]["msg"]
    assert f"AIRLOCK_AGENT_CHECKPOINT_CA_FILE={path}: not a PEM CA bundle" in message


def test_a_ca_file_gone_after_the_settings_read_it_is_a_clear_config_error(
    tls_checkpoint: TlsCheckpoint, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca-copy.pem"
    ca_file.write_bytes(tls_checkpoint.ca.ca_file.read_bytes())
    settings = _settings(tls_checkpoint, ca_file)
    ca_file.unlink()
    with pytest.raises(ConfigError, match=r"AIRLOCK_AGENT_CHECKPOINT_CA_FILE=.*cannot be read"):
        _build(settings)
