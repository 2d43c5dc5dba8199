"""A fake HTTP/1.1 server on a real loopback socket that can send its answer a byte at a time.

``httpx.MockTransport`` hands whole responses to httpx, so it cannot show what a socket
does with a status line and headers that arrive one byte every so often. This one can:
:func:`serving_drips` accepts connections one after another on 127.0.0.1 (a port from
:func:`devstack.ports.free_port`), reads each request whole, and answers it with the
next of its scripted :class:`Answer` (the last one again once they run out): some bytes at
once, then others one at a time, over TLS if given a certificate. It stops by itself when
the block ends, and closes what it opened. Nothing here is fit for anything but tests.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from devstack.ports import free_port
from tests.support.tls import ServerCert

__all__ = ["DRIPPED_HEAD", "GIVE_UP_SLACK_S", "Answer", "DripServer", "ok_json", "serving_drips"]

#: How long the server waits on a client that sends nothing, and for its own stop.
_IO_TIMEOUT_S = 5.0
_STOP_DEADLINE_S = 10.0
#: How often the accept loop looks at the stop flag (a poll of a condition).
_ACCEPT_POLL_S = 0.05


@dataclass(frozen=True)
class Answer:
    """The bytes sent for one request: ``at_once``, then ``dripped`` one byte per
    ``byte_every_s``; then the connection is closed."""

    at_once: bytes = b""
    dripped: bytes = b""
    byte_every_s: float = 0.2


#: A status line and a header that never end: a byte every 0.2 s, well inside any read
#: timeout the tests give, so only a deadline on the whole exchange gives up on them. The
#: server sends these 300 bytes (60 s) and closes: without its deadline a test fails by
#: the time it took, and still ends by itself.
DRIPPED_HEAD = Answer(dripped=b"HTTP/1.1 200 OK\r\nX-Drip: " + b"." * 275, byte_every_s=0.2)
#: Time allowed past a deadline for the give-up itself. A loaded CI runner has taken 2.2 s
#: past a 1 s deadline, in-process imports and all; a client without its deadline takes
#: the whole drip.
GIVE_UP_SLACK_S = 8.0


def ok_json(body: bytes) -> Answer:
    """A whole 200 answer with a JSON body, at once; the connection closed after it."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
    )
    return Answer(head + body)


@dataclass
class DripServer:
    url: str
    #: The request line of each request read, in order.
    requests: list[bytes] = field(default_factory=list)
    #: Connections whose TLS handshake failed (the client refused the certificate, say).
    handshakes_failed: int = 0


def _read_request(conn: socket.socket) -> bytes:
    """The request's head and as much body as its Content-Length says; the request line.

    Read whole before answering, so that closing the connection after the answer sends a
    FIN, not the RST that unread data would cause (and the client would see first)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(4096)
        if not chunk:
            break
        body += chunk
    return head.split(b"\r\n", 1)[0]


def _closed_by_client(conn: socket.socket, wait_s: float) -> bool:
    """Wait up to ``wait_s`` for the client to close (it sends nothing after its request);
    is it gone? Without this a client that gave up is noticed only when a send fails,
    a byte or two later, and the next connection waits that long to be accepted."""
    readable, _, _ = select.select([conn], [], [], wait_s)
    if not readable:
        return False
    with contextlib.suppress(OSError):  # reset, or TLS cut without close_notify
        conn.recv(1)  # b"" at the end of the stream; any bytes are not expected either
    return True


def _send(conn: socket.socket, answer: Answer, stop: threading.Event) -> None:
    if answer.at_once:
        conn.sendall(answer.at_once)
    for i in range(len(answer.dripped)):
        # The pace of the drip, cut short when the client closes or the test ends: not a
        # wait for a race.
        if _closed_by_client(conn, answer.byte_every_s) or stop.is_set():
            return
        conn.sendall(answer.dripped[i : i + 1])


@contextmanager
def serving_drips(
    answers: Sequence[Answer], *, tls: ServerCert | None = None
) -> Iterator[DripServer]:
    """Serve ``answers`` on 127.0.0.1, one connection at a time; yields the server, whose
    ``url`` is ``http://127.0.0.1:N`` (``https://`` with ``tls``)."""
    if not answers:
        raise ValueError("a drip server needs at least one answer")
    context: ssl.SSLContext | None = None
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert_file, tls.key_file)
    port = free_port()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(8)
    listener.settimeout(_ACCEPT_POLL_S)
    server = DripServer(f"{'https' if tls else 'http'}://127.0.0.1:{port}")
    stop = threading.Event()

    def serve() -> None:
        served = 0
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            raw.settimeout(_IO_TIMEOUT_S)
            conn = raw
            try:
                if context is not None:
                    try:
                        conn = context.wrap_socket(raw, server_side=True)
                    except (ssl.SSLError, OSError):
                        server.handshakes_failed += 1
                        continue
                server.requests.append(_read_request(conn))
                _send(conn, answers[min(served, len(answers) - 1)], stop)
                served += 1
            except OSError:
                served += 1  # the client gave up on this one: the next answer is next
            finally:
                with contextlib.suppress(OSError):
                    conn.close()
                raw.close()

    thread = threading.Thread(target=serve, name="drip-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join(_STOP_DEADLINE_S)
        listener.close()
        assert not thread.is_alive(), "drip server did not stop"
