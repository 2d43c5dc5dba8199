"""The checkpoint API as the person-facing commands see it, and the exit codes they share.

The commands for people (``login``, ``approvals …``) are clients: they reach the
checkpoint over HTTP with the person's own token and never import a service. Outcomes
map onto exit codes a script can rely on::

    0  done
    1  refused by the checkpoint (its code and message are printed), or a check the
       checkpoint also makes failed locally (a typed confirmation that does not match)
    2  usage or configuration: bad arguments, not logged in, unsafe session file, no
       terminal to confirm on
    3  the checkpoint could not be reached, answered 5xx, or answered something that is
       not the API (including an action whose hash does not match its text)

Error hierarchy::

    ClientError
    ├── CheckpointRefused     a 4xx with the API's {"error": {"code", "message"}}
    └── CheckpointUnavailable transport error, 5xx, or a response that is not the API

Nothing here prints or logs a token, and what it prints of an answer is escaped
(:mod:`airlock.cli._text`): a checkpoint's text never reaches the terminal raw.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import typer

from ._text import inert_json, say

if TYPE_CHECKING:
    # Imported where a call is made: ``airlock --help`` must not pay for httpx, nor for
    # the session file's pydantic model (a test holds it to this).
    import ssl

    import httpx

    from ._session import Credentials

__all__ = [
    "EXIT_CODES_HELP",
    "CheckpointClient",
    "CheckpointRefused",
    "CheckpointUnavailable",
    "ClientError",
    "ExitCode",
    "LocalRefusal",
    "handle_errors",
]

_USER_AGENT: Final = "airlock-cli/1"
#: Each call, whole (connect, TLS handshake, request, status line, headers, body), gets at
#: most this long (:mod:`airlock.httpdeadline`): httpx's timeouts bound one socket
#: operation each, so a checkpoint or a proxy dripping its answer would otherwise hold the
#: command for as long as it liked. Past it the checkpoint is unavailable (exit 3).
_DEADLINE_S: Final = 15.0
#: httpx's per-operation timeouts (built into an ``httpx.Timeout`` where a client is made).
_TIMEOUT_S: Final = _DEADLINE_S
_CONNECT_TIMEOUT_S: Final = 5.0


class ExitCode(enum.IntEnum):
    OK = 0
    REFUSED = 1
    USAGE = 2
    UNAVAILABLE = 3


EXIT_CODES_HELP: Final = (
    "Exit codes: 0 done; 1 refused by the checkpoint (its code and message are printed); "
    "2 usage or configuration error (bad arguments, not logged in); "
    "3 the checkpoint is unreachable, answered with a server error, or gave an answer this "
    "CLI cannot use (an older checkpoint)."
)


class ClientError(Exception):
    """Root of what talking to the checkpoint can raise."""


class CheckpointRefused(ClientError):
    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class CheckpointUnavailable(ClientError):
    pass


class LocalRefusal(ClientError):
    """A rule the checkpoint also enforces, refused before anything was sent (exit 1)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


#: The largest answer read as JSON: a page of 200 proposals, each with its action text
#: (at most 16 KiB canonical, escaped once more as a string), is a few MiB.
_MAX_ANSWER_BYTES: Final = 32 * 1024 * 1024


class _NotStrictJSON(ValueError):
    pass


def _json_answer(response: httpx.Response) -> Any:
    """The checkpoint's answer parsed strictly (docs/protocol.md#strict-json), the one way this CLI
    reads one.

    ``response.json()`` is Python's ``json.loads``: it keeps the last of duplicate keys
    (``{"state": "rejected", "state": "approved"}`` reads as approved), and accepts
    ``NaN``, ``Infinity`` and lone surrogates, so a checkpoint, or anything in between,
    could show a person one thing while another parser reads another. Refused too:
    invalid UTF-8, a BOM, trailing data, floats (the API has none), deep nesting. Not NFC
    is allowed: the API relays text it did not write, and nothing here is signed.
    """
    from airlock.protocol import Refused, loads_strict

    try:
        return loads_strict(response.content, max_bytes=_MAX_ANSWER_BYTES, nfc=False)
    except Refused as exc:
        raise _NotStrictJSON(exc.detail) from None


def _refusal(response: httpx.Response) -> CheckpointRefused | None:
    try:
        body = _json_answer(response)
    except _NotStrictJSON:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    code, message = error.get("code"), error.get("message")
    if not isinstance(code, str) or not isinstance(message, str):
        return None
    return CheckpointRefused(code, message, response.status_code)


class CheckpointClient:
    """A small synchronous client over ``/v1``; one per command invocation."""

    def __init__(
        self, url: str, token: str | None = None, *, verify: ssl.SSLContext | bool = True
    ) -> None:
        """``verify``: httpx's default (certifi, or ``SSL_CERT_FILE`` if set), or one CA
        file's context (:func:`airlock.tls.checkpoint_verify`); never False."""
        if verify is False:
            raise ValueError("TLS verification of the checkpoint cannot be turned off")
        import httpx

        from airlock.httpdeadline import with_deadlines

        self.url = url
        headers = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=url,
            headers=headers,
            timeout=httpx.Timeout(_TIMEOUT_S, connect=_CONNECT_TIMEOUT_S),
            follow_redirects=False,
            verify=verify,
        )
        # httpx's own pools (with SSL_CERT_FILE and the proxies from the environment, as
        # before), their sockets bounded by the deadline ``raw`` opens.
        with_deadlines(self._http)

    @classmethod
    def signed_in(cls, credentials: Credentials) -> CheckpointClient:
        return cls(credentials.url, credentials.token)

    def __enter__(self) -> CheckpointClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def raw(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response whatever its status; transport failures are unavailability."""
        import httpx

        from airlock.httpdeadline import within

        from ._session import SessionError

        try:
            with within(_DEADLINE_S):
                return self._http.request(method, path, **kwargs)
        except httpx.InvalidURL as exc:
            raise SessionError(f"invalid checkpoint URL {self.url!r}: {exc}") from None
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise CheckpointUnavailable(
                f"cannot reach the checkpoint at {self.url}: {reason}"
            ) from None

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The parsed JSON body of a 2xx answer (``None`` for 204); raises otherwise."""
        response = self.raw(method, path, **kwargs)
        if response.status_code >= 500:
            refused = _refusal(response)
            detail = f" ({refused})" if refused else ""
            raise CheckpointUnavailable(
                f"the checkpoint answered {response.status_code}{detail}; try again later"
            )
        if response.status_code >= 400:
            refused = _refusal(response)
            if refused is None:
                raise CheckpointUnavailable(
                    f"unexpected {response.status_code} from {self.url} (not the checkpoint API?)"
                )
            raise refused
        if response.status_code == 204:
            return None
        if not 200 <= response.status_code < 300:
            raise CheckpointUnavailable(f"unexpected {response.status_code} from {self.url}")
        try:
            return _json_answer(response)
        except _NotStrictJSON as exc:
            raise CheckpointUnavailable(f"{self.url} did not answer JSON: {exc}") from None


def _say(message: str) -> None:
    # A refusal's code and message, and many errors, are the checkpoint's own text.
    say(message, err=True)


@contextmanager
def handle_errors(*, as_json: bool = False, hint_login: bool = True) -> Iterator[None]:
    """Turn client errors into a message on stderr and the documented exit code.

    With ``as_json`` a refusal is also written to stdout as the API's own error object,
    so a script can read the code without parsing prose.
    """
    from ._session import SessionError

    try:
        yield
    except SessionError as exc:
        _say(f"error: {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    except (CheckpointRefused, LocalRefusal) as exc:
        where = "refused locally, nothing sent" if isinstance(exc, LocalRefusal) else "refused"
        _say(f"{where}: {exc.code}: {exc.message}")
        if hint_login and exc.code == "E_UNAUTHENTICATED":
            _say("your session has ended or was revoked: run `airlock login`")
        if as_json:
            error = {"error": {"code": exc.code, "message": exc.message}}
            sys.stdout.write(inert_json(error, indent=None) + "\n")
        raise typer.Exit(ExitCode.REFUSED) from None
    except CheckpointUnavailable as exc:
        _say(f"error: {exc}")
        raise typer.Exit(ExitCode.UNAVAILABLE) from None
