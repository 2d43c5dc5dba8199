"""The agent's side of the checkpoint API: submit, withdraw, and read its decisions back.

:class:`CheckpointClient` is the port the planner's caller uses; :class:`HttpCheckpointClient`
speaks ``/v1`` with the agent's service token. Retries are bounded exponential backoff
on transport errors and 5xx/429 only. They are safe because every request is
idempotent: a proposal is resubmitted as the **same bytes** (same id, same hash → the
checkpoint answers 200 with the existing record), and a withdraw that already landed is
recognised by reading the proposal back. There is no jitter: one agent per account
makes the retries, and the backoff only has to let a restarting checkpoint come back.

This module never logs the token, and never sends anything but the agent's own actions.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from airlock import apiclient
from airlock.api import Proposal, ProposalPage
from airlock.protocol import ProposedAction

from .errors import CheckpointRefused, CheckpointUnavailable

__all__ = [
    "CheckpointClient",
    "HttpCheckpointClient",
    "ProposalRecord",
    "SubmitResult",
]

_RETRY_STATUS: Final = frozenset({429, 500, 502, 503, 504})
_PAGE: Final = 200  # the checkpoint's largest page

_M = TypeVar("_M", bound=BaseModel)


def _answer(response: apiclient.Answer, model: type[_M]) -> _M:
    """The checkpoint's answer parsed strictly (docs/protocol.md#strict-json) into the
    kernel's ``model`` (:mod:`airlock.api`), the one way the agent reads one.

    httpx's ``json()`` keeps the last of duplicate keys and accepts NaN: a checkpoint, or
    anything in between, could tell the agent ``executed`` (which makes an instance a
    candidate for delete, docs/architecture.md#staged-clean-up) where another parser reads
    ``pending``. Not NFC is allowed: the API relays text it did not write (a person's note).

    Raises:
        CheckpointUnavailable: the answer is not strict JSON, or not ``model``.
    """
    try:
        return model.model_validate(response.json())
    except apiclient.NotStrictJSON as exc:
        raise CheckpointUnavailable(
            f"the checkpoint answered {response.status} with malformed JSON: {exc.detail}"
        ) from None
    except ValidationError as exc:
        raise CheckpointUnavailable(
            f"the checkpoint answered {response.status} with no {model.__name__} "
            f"({exc.error_count()} problems)"
        ) from None


SubmitKind = Literal["created", "exists", "denied", "conflict", "duplicate_open"]


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """How the checkpoint took a proposal.

    ``created`` (201) and ``exists`` (200: same id and hash) are success; ``denied`` (a
    deny rule matched), ``conflict`` (same id, another hash: this id was already used
    with other evidence) and ``duplicate_open`` (another open proposal holds the target)
    are expected refusals the agent records and moves past.
    """

    kind: SubmitKind
    proposal_id: str
    state: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ProposalRecord:
    """What the agent reads back about one proposal (a subset of the API's ProposalOut)."""

    id: str
    state: str
    account: str
    region: str
    resource_type: str
    resource_id: str
    operation: str
    created_at: int
    approval_deadline: int
    rejected_at: int | None = None
    reject_reason: str | None = None
    #: When the executor's outcome was reported (checkpoint clock), if any.
    outcome_at: int | None = None
    outcome: str | None = None
    #: When the approval was issued (checkpoint clock), if one was: before any write of it.
    approved_at: int | None = None
    #: When that approval expires (checkpoint clock): no executor uses it after.
    approval_expires_at: int | None = None

    @classmethod
    def from_api(cls, p: Proposal) -> ProposalRecord:
        """The fields the agent reads of the checkpoint's record."""
        return cls(
            id=p.id,
            state=p.state,
            account=p.account,
            region=p.region,
            resource_type=p.resource_type,
            resource_id=p.resource_id,
            operation=p.operation,
            created_at=p.created_at,
            approval_deadline=p.approval_deadline,
            rejected_at=p.rejection.at if p.rejection else None,
            reject_reason=p.rejection.reason_code if p.rejection else None,
            outcome_at=p.outcome.reported_at if p.outcome else None,
            outcome=p.outcome.outcome if p.outcome else None,
            approved_at=p.approval.issued_at if p.approval else None,
            approval_expires_at=p.approval.expires_at if p.approval else None,
        )


class CheckpointClient(Protocol):
    def submit(self, action: ProposedAction) -> SubmitResult:
        """Submit (idempotently); expected refusals are results, others raise."""
        ...

    def withdraw(self, proposal_id: str, note: str) -> str:
        """Withdraw an open proposal; return its state afterwards."""
        ...

    def proposals(
        self, *, account: str, state: str | Sequence[str], operation: str | None = None
    ) -> Iterator[ProposalRecord]:
        """Proposals of the account in one state (or any of several), newest first, page
        by page."""
        ...


class HttpCheckpointClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        http: httpx.Client | None = None,
        timeout: float = 10.0,
        verify: ssl.SSLContext | Literal[True] = True,
        attempts: int = 6,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not token:
            raise ValueError("the agent's checkpoint token is required")
        if attempts < 1:
            raise ValueError("at least one attempt")
        # ``verify=True`` with httpx's default trust_env: certifi's bundle, or the file
        # SSL_CERT_FILE names; a context (AIRLOCK_AGENT_CHECKPOINT_CA_FILE) is used alone.
        # The pools httpx builds, proxies from the environment included, are kept; only
        # the sockets under them are bounded by each attempt's deadline.
        self._http = http or apiclient.checkpoint_http(
            base_url, verify=verify, timeout=timeout, trust_env=True
        )
        self._owns_http = http is None
        #: Each attempt, whole (connect to the answer's last byte), gets at most this long:
        #: httpx's timeout bounds one socket operation only, so a checkpoint or a proxy
        #: dripping its answer would otherwise hold the agent's run for as long as it liked.
        #: An attempt past it is a transport error like any other, retried with backoff.
        self._deadline_s = timeout
        self._headers = {"Authorization": f"Bearer {token}"}
        self._attempts = attempts
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._sleep = sleep
        #: Requests sent, retries included (for reports and tests).
        self.requests = 0
        self.retries = 0

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __repr__(self) -> str:  # never show the token
        return f"HttpCheckpointClient(base_url={str(self._http.base_url)!r})"

    # -- transport with bounded retries

    def _send(
        self, method: str, path: str, *, content_type: str | None = None, **kwargs: Any
    ) -> apiclient.Answer:
        headers = dict(self._headers)
        if content_type is not None:
            headers["Content-Type"] = content_type
        delay = self._backoff_initial
        last = ""
        for attempt in range(1, self._attempts + 1):
            self.requests += 1
            try:
                response = apiclient.exchange(
                    self._http, method, path, deadline_s=self._deadline_s, headers=headers, **kwargs
                )
            except apiclient.CheckpointUnavailable as exc:
                last = str(exc)
            else:
                if response.status not in _RETRY_STATUS:
                    return response
                last = f"HTTP {response.status}"
            if attempt < self._attempts:
                self.retries += 1
                self._sleep(delay)
                delay = min(delay * 2, self._backoff_max)
        raise CheckpointUnavailable(
            f"{method} {path}: checkpoint unavailable after {self._attempts} attempts ({last})"
        )

    @staticmethod
    def _error(response: apiclient.Answer) -> tuple[str, str]:
        refused = response.refusal()
        if refused is None:
            return "", response.body.decode("utf-8", errors="replace")[:300]
        return refused.code, refused.message[:300]

    def _refused(self, response: apiclient.Answer) -> CheckpointRefused:
        code, message = self._error(response)
        return CheckpointRefused(response.status, code, message)

    # -- the port

    def submit(self, action: ProposedAction) -> SubmitResult:
        # The canonical bytes, built once: every retry sends exactly what was hashed.
        body = action.canonical_bytes()
        response = self._send(
            "POST", "/v1/proposals", content=body, content_type="application/json"
        )
        pid = action.proposal_id
        if response.status in (200, 201):
            state = _answer(response, Proposal).state
            return SubmitResult("created" if response.status == 201 else "exists", pid, state)
        code, message = self._error(response)
        if response.status == 403 and code == "E_POLICY_DENIED":
            return SubmitResult("denied", pid, "denied", message)
        if response.status == 409 and code == "E_CONFLICT":
            return SubmitResult("conflict", pid, None, message)
        if response.status == 409 and code == "E_DUPLICATE_OPEN":
            return SubmitResult("duplicate_open", pid, None, message)
        raise CheckpointRefused(response.status, code, message)

    def withdraw(self, proposal_id: str, note: str) -> str:
        response = self._send(
            "POST", f"/v1/proposals/{proposal_id}/withdraw", json={"note": note[:2000]}
        )
        if response.status == 200:
            return _answer(response, Proposal).state
        code, _ = self._error(response)
        if response.status == 409 and code == "E_STATE":
            # Perhaps our own earlier attempt landed and only its answer was lost, or a
            # human decided first: either way, report the state it is in now.
            return self.get(proposal_id).state
        raise self._refused(response)

    def get(self, proposal_id: str) -> ProposalRecord:
        response = self._send("GET", f"/v1/proposals/{proposal_id}")
        if response.status != 200:
            raise self._refused(response)
        return ProposalRecord.from_api(_answer(response, Proposal))

    def proposals(
        self, *, account: str, state: str | Sequence[str], operation: str | None = None
    ) -> Iterator[ProposalRecord]:
        states = [state] if isinstance(state, str) else list(state)
        params: dict[str, str | int | list[str]] = {
            "account": account,
            "state": states,
            "limit": _PAGE,
        }
        if operation is not None:
            params["operation"] = operation
        while True:
            response = self._send("GET", "/v1/proposals", params=params)
            if response.status != 200:
                raise self._refused(response)
            page = _answer(response, ProposalPage)
            for item in page.items:
                yield ProposalRecord.from_api(item)
            if not page.next_before:
                return
            params["before"] = page.next_before
