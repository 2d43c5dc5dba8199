"""A real SMTP server for tests (aiosmtpd), with STARTTLS and a password, in a thread."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from devstack.ports import free_port

USER = "airlock"
PASSWORD = "smtp-password-do-not-leak"


@dataclass
class Mailbox:
    port: int = 0
    messages: list[Message] = field(default_factory=list)
    #: For each message: was the session under TLS, and who signed in.
    sessions: list[tuple[bool, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def got(self) -> list[Message]:
        with self.lock:
            return list(self.messages)


class _Handler:
    def __init__(self, box: Mailbox) -> None:
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.box.lock:
            self.box.messages.append(message_from_bytes(envelope.content))
            auth = session.auth_data
            login = auth.login.decode() if isinstance(auth, LoginPassword) else None
            self.box.sessions.append((session.ssl is not None, login))
        return "250 OK"


def _authenticator(
    server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
) -> AuthResult:
    ok = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login == USER.encode()
        and auth_data.password == PASSWORD.encode()
    )
    return AuthResult(success=ok, handled=False, auth_data=auth_data)


@contextmanager
def smtp_server(tls: ssl.SSLContext | None) -> Iterator[Mailbox]:
    """An SMTP server on loopback; with ``tls``, STARTTLS offered and required (and a
    sign-in allowed only under it); without, no STARTTLS at all."""
    box = Mailbox(port=free_port())
    kwargs: dict[str, Any] = {}
    if tls is not None:
        kwargs = {
            "tls_context": tls,
            "require_starttls": True,
            "authenticator": _authenticator,
            "auth_require_tls": True,
        }
    controller = Controller(_Handler(box), hostname="127.0.0.1", port=box.port, **kwargs)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()
