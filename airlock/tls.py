"""What a client that calls the checkpoint trusts for TLS: certifi's bundle, or one CA file.

The executor, the web app and the agent verify the checkpoint's certificate and host name
on every https call. By default they trust certifi's CA bundle (httpx's default). A
checkpoint whose certificate a private CA issued is reached by naming that CA's PEM
bundle (``AIRLOCK_<SERVICE>_CHECKPOINT_CA_FILE``): then exactly that bundle is trusted,
certifi's is not.

This module must never turn verification off or weaken it, and never fall back: a CA file
that cannot be read or holds no certificate is :class:`CAFileError`, so a process that
names one refuses to start rather than trust something else.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Literal

__all__ = ["CAFileError", "ca_file_context", "checkpoint_verify"]


class CAFileError(ValueError):
    """A CA file that is missing, unreadable, not PEM, or holds no certificate.

    A ``ValueError``, so a settings validator that lets it through reports it as a
    settings error.
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def ca_file_context(path: Path) -> ssl.SSLContext:
    """A client context that trusts exactly the certificates in the PEM file ``path``.

    Host names are checked and a certificate is required (set explicitly, though they are
    ``create_default_context``'s defaults); neither the system store nor certifi is loaded.
    """
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(path))
    except ssl.SSLError as exc:  # before OSError: it is one
        raise CAFileError(path, f"not a PEM CA bundle ({exc.reason or exc})") from None
    except OSError as exc:
        raise CAFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    # OpenSSL accepts a file with only CRLs in it; that would make every call fail later
    # with a verification error, so it is refused here, where the cause is plain.
    if context.cert_store_stats()["x509"] == 0:
        raise CAFileError(path, "holds no certificate")
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = True
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def checkpoint_verify(ca_file: Path | None) -> ssl.SSLContext | Literal[True]:
    """httpx's ``verify`` for a client of the checkpoint: the context of ``ca_file`` when
    one is set, else ``True`` (certifi's bundle; also ``SSL_CERT_FILE`` for a client built
    with ``trust_env=True``). Never ``False``."""
    if ca_file is None:
        return True
    return ca_file_context(ca_file)
