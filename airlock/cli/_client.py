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

The two checkpoint errors are also :mod:`airlock.apiclient`'s, whose core (transport,
deadline, strict answers, the error mapping) :class:`CheckpointClient` wraps.

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

from airlock import apiclient

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


class CheckpointRefused(ClientError, apiclient.CheckpointRefused):
    """The checkpoint's refusal (``code``, ``message``, ``status``): exit 1."""


class CheckpointUnavailable(ClientError, apiclient.CheckpointUnavailable):
    """No answer, a 5xx, or an answer that is not the API: exit 3."""


class LocalRefusal(ClientError):
    """A rule the checkpoint also enforces, refused before anything was sent (exit 1)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


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

        self.url = url
        headers = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        # httpx's own pools (with SSL_CERT_FILE and the proxies from the environment),
        # their sockets bounded by the deadline of each call.
        self._http = apiclient.checkpoint_http(
            url,
            verify=verify,
            timeout=httpx.Timeout(_TIMEOUT_S, connect=_CONNECT_TIMEOUT_S),
            headers=headers,
            trust_env=True,
        )

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
        """The parsed JSON body of a 2xx answer (``None`` for 204); raises otherwise.

        Parsed strictly (docs/protocol.md#strict-json): ``response.json()`` is Python's
        ``json.loads``, which keeps the last of duplicate keys (``{"state": "rejected",
        "state": "approved"}`` reads as approved), so a checkpoint, or anything in
        between, could show a person one thing while another parser reads another.
        """
        import httpx

        from ._session import SessionError

        try:
            answer = apiclient.exchange(self._http, method, path, deadline_s=_DEADLINE_S, **kwargs)
        except httpx.InvalidURL as exc:
            raise SessionError(f"invalid checkpoint URL {self.url!r}: {exc}") from None
        except apiclient.CheckpointUnavailable as exc:
            reason = (str(exc.cause) or type(exc.cause).__name__) if exc.cause else str(exc)
            raise CheckpointUnavailable(
                f"cannot reach the checkpoint at {self.url}: {reason}"
            ) from None
        if answer.status >= 500:
            refused = answer.refusal()
            detail = f" ({refused})" if refused else ""
            raise CheckpointUnavailable(
                f"the checkpoint answered {answer.status}{detail}; try again later"
            )
        if answer.status >= 400:
            refused = answer.refusal()
            if refused is None:
                raise CheckpointUnavailable(
                    f"unexpected {answer.status} from {self.url} (not the checkpoint API?)"
                )
            raise CheckpointRefused(refused.code, refused.message, refused.status)
        if answer.status == 204:
            return None
        if not answer.ok:
            raise CheckpointUnavailable(f"unexpected {answer.status} from {self.url}")
        try:
            return answer.json()
        except apiclient.NotStrictJSON as exc:
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
