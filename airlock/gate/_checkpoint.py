"""The gate's side of the checkpoint API: propose, read a proposal, report a receipt
(docs/gate.md#the-call-path). Every request carries the agent token; nothing here logs
it.

Built on :mod:`airlock.apiclient` (one deadline per exchange, strict answers, the API's
error form). Answers are the checkpoint's word only: what the gate runs is decided by
the signed bundle it verifies, never by a field read here.
"""

from __future__ import annotations

import enum
from typing import Any, Final

import httpx
from pydantic import ValidationError

from airlock.api import OUTCOMES_PATH, REFUSALS_PATH, Proposal, ReceiptReport
from airlock.apiclient import Answer, ApiError, NotStrictJSON, exchange
from airlock.protocol import ToolCall

from .errors import Unavailable

__all__ = ["CheckpointClient", "Submitted"]

#: One exchange, connect to the answer's last byte.
_DEADLINE_S: Final = 10.0


class Submitted(enum.StrEnum):
    """The checkpoint's answer to a proposal."""

    CREATED = "created"  # 201
    EXISTS = "exists"  # 200: the same id and hash
    CONFLICT = "conflict"  # 409 E_CONFLICT: the same id, another hash
    DUPLICATE_OPEN = "duplicate_open"  # 409 E_DUPLICATE_OPEN: another open one holds the key
    DENIED = "denied"  # 403 E_POLICY_DENIED


class CheckpointClient:
    """Propose, read and report for one agent token over ``http`` (its base URL set)."""

    def __init__(self, http: httpx.Client, token: str) -> None:
        self._http = http
        self._headers = {"Authorization": f"Bearer {token}"}

    def __repr__(self) -> str:  # never show the token
        return f"CheckpointClient({self._http.base_url!s})"

    def _send(self, method: str, path: str, **kwargs: Any) -> Answer:
        headers = dict(self._headers)
        extra = kwargs.pop("headers", None)
        if isinstance(extra, dict):
            headers.update(extra)
        try:
            return exchange(
                self._http, method, path, deadline_s=_DEADLINE_S, headers=headers, **kwargs
            )
        except ApiError as exc:
            raise Unavailable(f"E_UNAVAILABLE: {method} {path}: {exc}") from None

    def proposal(self, proposal_id: str) -> Proposal | None:
        """``GET /v1/proposals/{id}``; None when the checkpoint has no such proposal."""
        answer = self._send("GET", f"/v1/proposals/{proposal_id}")
        if answer.status == 404 and answer.error_code() == "E_NOT_FOUND":
            return None
        if answer.status != 200:
            raise _refused(answer, f"GET /v1/proposals/{proposal_id}")
        try:
            return Proposal.model_validate(answer.json())
        except (NotStrictJSON, ValidationError):
            raise Unavailable("E_UNAVAILABLE: the answer is not a proposal") from None

    def submit(self, call: ToolCall) -> tuple[Submitted, Proposal | None]:
        """``POST /v1/proposals`` with the tool call's canonical bytes; the proposal the
        checkpoint answered with when it took the call (201, or 200 for the same bytes)."""
        answer = self._send(
            "POST",
            "/v1/proposals",
            content=call.canonical_bytes(),
            headers={"Content-Type": "application/json"},
        )
        code = "" if answer.ok else answer.error_code()
        if answer.status in (200, 201):
            try:
                proposal = Proposal.model_validate(answer.json())
            except (NotStrictJSON, ValidationError):
                raise Unavailable("E_UNAVAILABLE: the answer is not a proposal") from None
            return (Submitted.CREATED if answer.status == 201 else Submitted.EXISTS), proposal
        if answer.status == 409 and code == "E_CONFLICT":
            return Submitted.CONFLICT, None
        if answer.status == 409 and code == "E_DUPLICATE_OPEN":
            return Submitted.DUPLICATE_OPEN, None
        if answer.status == 403 and code == "E_POLICY_DENIED":
            return Submitted.DENIED, None
        raise _refused(answer, "POST /v1/proposals")

    def report(self, kind: str, envelope_text: str) -> Answer:
        """Post one stored receipt: a refusal before use to ``/v1/refusals``, an outcome
        or resolution to ``/v1/outcomes``. The answer is the caller's to judge."""
        body = ReceiptReport.of(envelope_text).to_json_bytes()
        path = REFUSALS_PATH if kind == "refusal" else OUTCOMES_PATH
        return self._send("POST", path, content=body, headers={"Content-Type": "application/json"})


def _refused(answer: Answer, what: str) -> Unavailable:
    return Unavailable(f"E_UNAVAILABLE: {what}: HTTP {answer.status} {answer.error_code()}")
