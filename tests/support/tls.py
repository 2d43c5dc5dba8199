"""Throwaway certificate authorities, and an ASGI app served over real TLS on loopback.

:func:`make_ca` makes a self-signed CA and :meth:`TestCA.issue` a server certificate for
``127.0.0.1`` (an IP subject alternative name) or any other names, all written as PEM
into a directory of the test's own. :func:`serving_tls` runs uvicorn with that
certificate in a thread of this process (no ``asyncio.run`` on the test's thread, where a
Playwright loop may be running) on a socket bound before the server starts, at a port
from :func:`devstack.ports.free_port`; it stops by itself when the block ends.
Nothing here is fit for anything but tests: keys are unencrypted files in a tmp dir.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devstack.ports import free_port

if TYPE_CHECKING:
    from tests.checkpoint.harness import World

__all__ = ["ServerCert", "TestCA", "TlsCheckpoint", "make_ca", "serving_tls", "tls_checkpoint"]

_START_DEADLINE_S = 10.0
_STOP_DEADLINE_S = 10.0


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@dataclass(frozen=True)
class ServerCert:
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class TestCA:
    """A CA whose certificate is ``ca_file`` (PEM) and whose key signs what it issues."""

    __test__ = False  # not a test class, whatever pytest makes of its name

    name: str
    directory: Path
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def ca_file(self) -> Path:
        return self.directory / f"{self.name}.ca.pem"

    def issue(
        self, label: str, *, ips: tuple[str, ...] = ("127.0.0.1",), dns: tuple[str, ...] = ()
    ) -> ServerCert:
        """A server certificate for these addresses and names, signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        names += [x509.DNSName(name) for name in dns]
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(label))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        out = ServerCert(self.directory / f"{label}.pem", self.directory / f"{label}.key")
        out.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, out.key_file)
        return out


def make_ca(directory: Path, name: str = "test-ca") -> TestCA:
    """A fresh self-signed CA, its certificate written to ``directory/<name>.ca.pem``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"Airlock {name}"))
        .issuer_name(_name(f"Airlock {name}"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    ca = TestCA(name, directory, key, cert)
    ca.ca_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return ca


@contextmanager
def serving_tls(app: Any, server_cert: ServerCert) -> Iterator[str]:
    """Serve ``app`` over https on 127.0.0.1; yields its base URL (``https://127.0.0.1:N``)."""
    port = free_port()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(
        app,
        log_level="critical",  # a refused handshake is the point of most tests here
        access_log=False,
        lifespan="on",
        ssl_certfile=str(server_cert.cert_file),
        ssl_keyfile=str(server_cert.key_file),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + _START_DEADLINE_S
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "TLS server did not start"
            time.sleep(0.01)  # polling a condition under a deadline, not waiting out a race
        yield f"https://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(_STOP_DEADLINE_S)
        sock.close()
        assert not thread.is_alive(), "TLS server did not stop"


@dataclass(frozen=True)
class TlsCheckpoint:
    """The real checkpoint (tests/checkpoint/harness.py) served over https at ``url``
    with a certificate that ``ca`` issued for 127.0.0.1."""

    world: World
    url: str
    ca: TestCA


@contextmanager
def tls_checkpoint(database_url: str, directory: Path) -> Iterator[TlsCheckpoint]:
    """A checkpoint on ``database_url`` behind a fresh private CA, for one block."""
    from tests.checkpoint.harness import make_world

    ca = make_ca(directory / "pki", "private-ca")
    world = make_world(database_url, directory)
    try:
        with serving_tls(world.app, ca.issue("checkpoint")) as url:
            yield TlsCheckpoint(world, url, ca)
    finally:
        world.client.close()
        world.checkpoint.db.dispose()
