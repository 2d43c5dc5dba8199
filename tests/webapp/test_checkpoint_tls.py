"""The web app reaches a checkpoint whose TLS certificate a private CA issued.

The checkpoint is the real one (tests/checkpoint/harness.py), served by uvicorn over real
TLS on 127.0.0.1 with a certificate from a throwaway CA (tests/support/tls.py). The web
app is built by its own factory from :class:`WebappSettings`, as ``airlock webapp``
builds it, and a person signs in through it: that works only when
``AIRLOCK_WEBAPP_CHECKPOINT_CA_FILE`` names the CA that issued the certificate.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from pydantic import ValidationError

from airlock.settings import WebappSettings
from tests.checkpoint.harness import PASSWORD
from tests.support import tls
from tests.support.tls import TlsCheckpoint, make_ca
from webapp import create_app
from webapp.client import CheckpointClient

from .conftest import csrf_of

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient


@pytest.fixture
def tls_checkpoint(sqlite_url: str, tmp_path: Path) -> Iterator[TlsCheckpoint]:
    with tls.tls_checkpoint(sqlite_url, tmp_path) as cp:
        yield cp


def _sign_in(settings: WebappSettings) -> tuple[int, str]:
    """Sign alice in through the web app built from ``settings``: (status, page text)."""
    # The test client speaks plain http to the web app: cookies must not be Secure-only.
    settings = settings.model_copy(
        update={"secure_cookies": False, "allowed_hosts": ("testserver",)}
    )
    with TestClient(create_app(settings)) as browser:
        page = browser.get("/login")
        response = browser.post(
            "/login",
            data={"username": "alice", "password": PASSWORD, "csrf_token": csrf_of(page.text)},
            follow_redirects=False,
        )
        return response.status_code, response.text


def test_with_the_private_ca_file_a_person_signs_in_through_the_checkpoint(
    tls_checkpoint: TlsCheckpoint,
) -> None:
    settings = WebappSettings(
        checkpoint_url=tls_checkpoint.url, checkpoint_ca_file=tls_checkpoint.ca.ca_file
    )
    status, text = _sign_in(settings)
    assert status == 303, text


def test_without_the_ca_file_the_private_certificate_is_refused(
    tls_checkpoint: TlsCheckpoint,
) -> None:
    status, text = _sign_in(WebappSettings(checkpoint_url=tls_checkpoint.url))
    assert status == 502 and "The checkpoint is not reachable" in text, text


def test_a_ca_file_of_another_ca_is_refused(tls_checkpoint: TlsCheckpoint, tmp_path: Path) -> None:
    other = make_ca(tmp_path / "other-pki", "other-ca")
    settings = WebappSettings(checkpoint_url=tls_checkpoint.url, checkpoint_ca_file=other.ca_file)
    status, text = _sign_in(settings)
    assert status == 502 and "The checkpoint is not reachable" in text, text


def test_ssl_cert_file_is_not_read_by_the_web_app(
    tls_checkpoint: TlsCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_checkpoint.ca.ca_file))
    status, _ = _sign_in(WebappSettings(checkpoint_url=tls_checkpoint.url))
    assert status == 502


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "cannot be read"), ("not a certificate\n", "not a PEM CA bundle")],
    ids=["missing", "not-pem"],
)
def test_a_bad_ca_file_is_a_settings_error_naming_the_variable_and_the_path(
    tmp_path: Path, content: str | None, reason: str
) -> None:
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValidationError) as caught:
        WebappSettings(checkpoint_url="https://checkpoint.internal", checkpoint_ca_file=path)
    message = caught.value.errors()[0]["msg"]
    assert f"AIRLOCK_WEBAPP_CHECKPOINT_CA_FILE={path}" in message and reason in message


def test_a_bad_ca_file_stops_airlock_webapp_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from airlock.cli import app

    monkeypatch.chdir(tmp_path)  # no stray .env
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("AIRLOCK_WEBAPP_CHECKPOINT_URL", "https://checkpoint.internal")
    monkeypatch.setenv("AIRLOCK_WEBAPP_CHECKPOINT_CA_FILE", str(path))
    served: list[object] = []

    def uvicorn_run_double(app: object, **_: object) -> None:
        served.append(app)  # a broken check ends here, not in a server that never stops

    monkeypatch.setattr(uvicorn, "run", uvicorn_run_double)
    result = CliRunner().invoke(app, ["webapp"])
    assert served == []
    assert result.exit_code == 2, result.output
    assert f"AIRLOCK_WEBAPP_CHECKPOINT_CA_FILE={path}" in result.output


def test_verification_cannot_be_turned_off() -> None:
    with pytest.raises(TypeError, match="verification stays on"):
        CheckpointClient("https://127.0.0.1:9", verify=False)  # type: ignore[arg-type]
