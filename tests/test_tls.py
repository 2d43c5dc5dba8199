"""``airlock.tls`` and the ``*_CHECKPOINT_CA_FILE`` settings: a CA file loads as exactly
that trust, or stops the start naming the variable and the path; nothing falls back."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from pydantic import ValidationError

from airlock.settings import AgentSettings, ExecutorSettings, WebappSettings
from airlock.tls import CAFileError, ca_file_context, checkpoint_verify
from tests.support.tls import make_ca


def test_a_ca_file_context_trusts_that_ca_alone_and_checks_host_names(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "only")
    context = ca_file_context(ca.ca_file)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    # Exactly the one certificate of the file: neither certifi nor the system store.
    [only] = context.get_ca_certs()
    assert only["subject"] == ((("commonName", "Airlock only"),),)


def test_no_ca_file_means_httpx_default_verification_never_off() -> None:
    assert checkpoint_verify(None) is True


def test_a_directory_is_not_a_ca_file(tmp_path: Path) -> None:
    with pytest.raises(CAFileError, match="cannot be read"):
        ca_file_context(tmp_path)


def test_a_file_of_crls_only_is_refused_for_holding_no_certificate(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "crl-issuer")
    now = dt.datetime.now(dt.UTC)
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.cert.subject)
        .last_update(now)
        .next_update(now + dt.timedelta(days=1))
        .sign(ca.key, hashes.SHA256())
    )
    path = tmp_path / "crl.pem"
    path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(CAFileError, match="holds no certificate"):
        ca_file_context(path)


@pytest.mark.parametrize(
    ("settings", "variable"),
    [
        (ExecutorSettings, "AIRLOCK_EXECUTOR_CHECKPOINT_CA_FILE"),
        (WebappSettings, "AIRLOCK_WEBAPP_CHECKPOINT_CA_FILE"),
        (AgentSettings, "AIRLOCK_AGENT_CHECKPOINT_CA_FILE"),
    ],
)
def test_each_service_reads_its_own_ca_file_and_refuses_a_bad_one_at_start(
    settings: type[ExecutorSettings | WebappSettings | AgentSettings],
    variable: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # settings read ./.env; never the developer's
    prefix = variable.removesuffix("CHECKPOINT_CA_FILE")
    monkeypatch.setenv("AIRLOCK_ENV", "dev")
    monkeypatch.setenv(f"{prefix}CHECKPOINT_URL", "https://checkpoint.internal")
    good = make_ca(tmp_path, "good").ca_file
    monkeypatch.setenv(variable, str(good))
    assert settings().checkpoint_ca_file == good

    missing = tmp_path / "missing.pem"
    monkeypatch.setenv(variable, str(missing))
    with pytest.raises(ValidationError) as caught:
        settings()
    assert f"{variable}={missing}: cannot be read" in caught.value.errors()[0]["msg"]

    monkeypatch.setenv(variable, str(good))
    monkeypatch.setenv(f"{prefix}CHECKPOINT_URL", "http://checkpoint.internal")
    with pytest.raises(ValidationError, match=f"{prefix}CHECKPOINT_URL is not an https URL"):
        settings()
