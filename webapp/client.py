"""The checkpoint API as the web app sees it: an httpx client and the shapes it reads.

Every call carries the signed-in person's own session token, passed in per call; the
client keeps no token, so one client serves every person without mixing them up. The
response shapes are parsed at this boundary into frozen models (unknown fields are
ignored so a newer checkpoint does not break the page; missing ones are an error): the
login answer and the proposal records are the kernel's :mod:`airlock.api`, shared with
the CLI; the answers only the web app reads are here.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from airlock import apiclient
from airlock.api import (
    ApproveRequest,
    EditRequest,
    LoginAnswer,
    NoteRequest,
    Proposal,
    ProposalPage,
    RejectRequest,
    ResolveRequest,
    request_body,
)

from .errors import CheckpointRefused, CheckpointUnavailable

__all__ = ["AuditView", "CheckpointClient", "KeyView", "Me", "NotifyPrefsView"]

_USER_AGENT: Final = "airlock-webapp/1"
_M = TypeVar("_M", bound=BaseModel)


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Me(_View):
    name: str
    kind: Literal["user", "service"]
    role: str

    @property
    def can_decide(self) -> bool:
        return self.role in ("approver", "admin")

    @property
    def can_resolve(self) -> bool:
        return self.role == "admin"


class AuditView(_View):
    ok: bool
    rows: int
    head_seq: int | None
    head_hash: str | None
    fault: str | None


class KeyView(_View):
    kid: str
    public_key: str
    status: str
    not_after: int | None = None


class _KeySet(_View):
    keys: list[KeyView]


class NotifyPrefsView(_View):
    """A person's notification preference (``/v1/me/notifications``)."""

    set: bool
    events: list[str]
    email: str | None
    #: The stored Slack URL, masked by the checkpoint (host and last four characters).
    slack: str | None
    kinds: list[str]
    groups: list[str]
    delivered: bool
    email_delivered: bool


class CheckpointClient:
    """Calls ``{base_url}/v1/…``. Thread-safe (httpx.Client is); holds no credential."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        verify: ssl.SSLContext | Literal[True] = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``timeout`` bounds each socket operation and also each whole call (connect,
        TLS handshake, request, status line, headers, body: :mod:`airlock.httpdeadline`),
        so a checkpoint or a proxy sending its answer a byte at a time holds a page, and
        the thread serving it, no longer than a checkpoint that does not answer.

        ``verify``: ``True`` trusts certifi's CA bundle; a checkpoint behind a private
        CA needs the context of its CA file (``AIRLOCK_WEBAPP_CHECKPOINT_CA_FILE``,
        :func:`airlock.tls.checkpoint_verify`). Verification cannot be turned off."""
        self._deadline_s = timeout
        self._http = apiclient.checkpoint_http(
            base_url.rstrip("/"),
            verify=verify,
            timeout=timeout,
            headers={"User-Agent": _USER_AGENT, "Accept": "application/json"},
            # No ambient proxy or .netrc credentials on a call that carries a session,
            # and no SSL_CERT_FILE: what is trusted is ``verify``, nothing else.
            trust_env=False,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    # -- sessions -------------------------------------------------------------------

    def login(
        self, username: str, password: str, *, client_address: str | None = None
    ) -> LoginAnswer:
        """Sign in for the browser at ``client_address`` (its socket's peer), sent as
        ``X-Forwarded-For``: the checkpoint slows failed sign-ins per client address,
        and trusts the header from this web app's address only when configured to
        (``AIRLOCK_CHECKPOINT_TRUSTED_PROXIES``)."""
        body = {"username": username, "password": password}
        headers = {"X-Forwarded-For": client_address} if client_address else {}
        data = self._call("POST", "/v1/sessions", None, json=body, headers=headers)
        return _parse(LoginAnswer, data)

    def logout(self, token: str) -> None:
        self._call("DELETE", "/v1/sessions/current", token)

    def me(self, token: str) -> Me:
        return _parse(Me, self._call("GET", "/v1/me", token))

    # -- proposals ------------------------------------------------------------------

    def proposals(
        self,
        token: str,
        *,
        state: str | Sequence[str] | None = None,
        background: bool = False,
        **filters: str | int | None,
    ) -> ProposalPage:
        """``state``: one, or several (sent as ``state`` repeated: a proposal in any of
        them). Only a checkpoint whose answer's ``states`` names them applied them all.
        ``background``: a page's own refresh (it keeps no idle session alive)."""
        params: dict[str, str | int | list[str]] = {
            k: v for k, v in filters.items() if v is not None and v != ""
        }
        if isinstance(state, str):
            if state:
                params["state"] = state
        elif state is not None:
            if not state:
                # Sent as nothing at all, it would list every state.
                raise ValueError("state: an empty sequence; pass None for every state")
            params["state"] = list(state)
        # A page's own refresh is no one's activity: it must not keep an idle session alive.
        headers = {"Airlock-Activity": "background"} if background else {}
        return _parse(
            ProposalPage,
            self._call("GET", "/v1/proposals", token, params=params, headers=headers),
        )

    def proposal(self, token: str, proposal_id: str) -> Proposal:
        return _parse(Proposal, self._call("GET", f"/v1/proposals/{proposal_id}", token))

    def approve(
        self, token: str, proposal_id: str, *, action_hash: str, confirm: str | None, note: str
    ) -> Proposal:
        body = ApproveRequest(action_hash=action_hash, confirm=confirm, note=note)
        return self._decide(token, proposal_id, "approve", body)

    def edit(
        self,
        token: str,
        proposal_id: str,
        *,
        action_hash: str,
        values: Mapping[str, object],
        confirm: str | None,
        note: str,
    ) -> Proposal:
        """Edit a tool call's arguments: the answer is the new proposal."""
        body = EditRequest(
            action_hash=action_hash, set=dict(values), confirm=confirm or None, note=note
        )
        return self._decide(token, proposal_id, "edit", body)

    def reject(self, token: str, proposal_id: str, *, reason_code: str, note: str) -> Proposal:
        body = RejectRequest(reason_code=reason_code, note=note)
        return self._decide(token, proposal_id, "reject", body)

    def revoke(self, token: str, proposal_id: str, *, note: str) -> Proposal:
        return self._decide(token, proposal_id, "revoke", NoteRequest(note=note))

    def resolve(self, token: str, proposal_id: str, *, decision: str, note: str) -> Proposal:
        body = ResolveRequest(decision=decision, note=note)
        return self._decide(token, proposal_id, "resolve", body)

    def _decide(
        self,
        token: str,
        proposal_id: str,
        verb: str,
        body: ApproveRequest | EditRequest | RejectRequest | NoteRequest | ResolveRequest,
    ) -> Proposal:
        data = self._call(
            "POST", f"/v1/proposals/{proposal_id}/{verb}", token, json=request_body(body)
        )
        return _parse(Proposal, data)

    # -- audit and keys -------------------------------------------------------------

    def audit(self, token: str) -> AuditView:
        return _parse(AuditView, self._call("GET", "/v1/audit", token))

    def keys(self) -> list[KeyView]:
        return _parse(_KeySet, self._call("GET", "/v1/keys", None)).keys

    # -- notification preferences ---------------------------------------------------

    def notify_prefs(self, token: str) -> NotifyPrefsView:
        return _parse(NotifyPrefsView, self._call("GET", "/v1/me/notifications", token))

    def set_notify_prefs(
        self,
        token: str,
        *,
        events: Sequence[str],
        email: str | None,
        slack_url: str | None,
        keep_slack_url: bool,
    ) -> NotifyPrefsView:
        body = {
            "events": list(events),
            "email": email,
            "slack_url": slack_url,
            "keep_slack_url": keep_slack_url,
        }
        return _parse(NotifyPrefsView, self._call("PUT", "/v1/me/notifications", token, json=body))

    def clear_notify_prefs(self, token: str) -> None:
        self._call("DELETE", "/v1/me/notifications", token)

    # -- transport ------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        token: str | None,
        *,
        json: Mapping[str, object] | None = None,
        params: Mapping[str, str | int | list[str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        headers = dict(headers or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        try:
            answer = apiclient.exchange(
                self._http,
                method,
                path,
                deadline_s=self._deadline_s,
                headers=headers,
                json=json,
                params=params,
            )
        except apiclient.CheckpointUnavailable as exc:
            kind = type(exc.cause).__name__ if exc.cause is not None else "no answer"
            raise CheckpointUnavailable(f"the checkpoint did not answer ({kind})") from None
        if answer.status == 204:
            return None
        try:
            data = answer.json()
        except apiclient.NotStrictJSON as exc:
            raise CheckpointUnavailable(
                f"the checkpoint answered {answer.status} without strict JSON ({exc.code})"
            ) from None
        if answer.ok:
            return data
        refused = answer.refusal()
        if refused is not None:
            raise CheckpointRefused(
                refused.code, refused.message, refused.status, retry_after=refused.retry_after
            )
        raise CheckpointUnavailable(f"the checkpoint answered {answer.status}")


def _parse(model: type[_M], data: Any) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise CheckpointUnavailable(
            f"unexpected answer from the checkpoint ({exc.error_count()} problems)"
        ) from None
