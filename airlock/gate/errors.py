"""The gate's one error tree, and its stable refusal codes.

Error hierarchy::

    Error               root of everything airlock.gate raises
    ├── Pending         the proposal awaits a decision: come back (same call, same proposal)
    ├── Rejected        a person rejected the proposal: reason code, note, who
    ├── Refused         the gate will not run this call; a stable ``code``, zero calls
    ├── EffectKeyConflict  the effect key is held by a proposal of another call
    ├── InDoubt         the call may have happened and nothing could tell: a person resolves
    ├── Unavailable     the checkpoint did not answer, or not in its API (nothing was run)
    └── ConfigError     a setting, key file or key set is missing or malformed

A refusal's ``code`` is one of the protocol's (:class:`airlock.protocol.RefusalCode`,
steps 1–13 of docs/protocol.md#tool-call-checks) or one of :class:`GateCode`. Every
refusal is recorded in the gate's ledger database (a refusal row or a ledger row, and an
audit event) before it is raised.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

__all__ = [
    "Change",
    "ConfigError",
    "EffectKeyConflict",
    "Error",
    "GateCode",
    "InDoubt",
    "Pending",
    "Refused",
    "Rejected",
    "Unavailable",
]


class GateCode(enum.StrEnum):
    """The gate's own refusal codes, beside the protocol's. Never renamed or reused."""

    E_ARGUMENTS = "E_ARGUMENTS"  # the approved call is not this call (tool, arguments, target, key)
    E_PREMISES = "E_PREMISES"  # a premise moved between the decision and the call
    E_INTERRUPTED = "E_INTERRUPTED"  # consumed, then the process stopped before the call
    E_WITHDRAWN = "E_WITHDRAWN"  # the proposal was withdrawn
    E_DENIED = "E_DENIED"  # the checkpoint's policy denied the proposal
    E_NOT_APPROVED = "E_NOT_APPROVED"  # the proposal is in a state that runs nothing
    E_REJECTED = "E_REJECTED"  # a person rejected the proposal (recorded; raised as Rejected)
    E_NOT_FOUND = "E_NOT_FOUND"  # resolve: no ledger row for that approval
    E_NOT_IN_DOUBT = "E_NOT_IN_DOUBT"  # resolve: the row is not in_doubt
    E_ALREADY_RESOLVED = "E_ALREADY_RESOLVED"  # resolve: a person decided already
    E_INVALID = "E_INVALID"  # resolve: the decision, who or the note is not valid


class Error(Exception):
    """Root of every error raised by :mod:`airlock.gate`."""


class Change(NamedTuple):
    """One premise that moved: its name, the value approved, the value read now."""

    field: str
    was: Any
    now: Any


class Pending(Error):
    """The proposal awaits a decision. Calling again with the same arguments picks the
    same proposal up."""

    def __init__(self, proposal_id: str, url: str, state: str) -> None:
        super().__init__(f"E_PENDING: {proposal_id} is {state}; decide at {url}")
        self.proposal_id = proposal_id
        self.url = url
        self.state = state


class Rejected(Error):
    """A person rejected the proposal."""

    def __init__(self, proposal_id: str, reason_code: str, note: str, by: str) -> None:
        super().__init__(f"E_REJECTED: {proposal_id} rejected by {by}: {reason_code}")
        self.proposal_id = proposal_id
        self.reason_code = reason_code
        self.note = note
        self.by = by


class Refused(Error):
    """The gate refused the call; the function was not called.

    ``code`` is stable (a :class:`airlock.protocol.RefusalCode` or :class:`GateCode`
    value), ``detail`` is for people, ``changes`` names the premises that moved
    (``E_PREMISES`` only).
    """

    def __init__(
        self,
        code: str,
        detail: str,
        proposal_id: str | None = None,
        changes: tuple[Change, ...] = (),
    ) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.proposal_id = proposal_id
        self.changes = changes


class EffectKeyConflict(Error):
    """The effect key's proposal is for another call (other tool, arguments or target)."""

    def __init__(self, effect_key: str, proposal_id: str, detail: str) -> None:
        super().__init__(f"E_EFFECT_KEY: {effect_key} ({proposal_id}): {detail}")
        self.effect_key = effect_key
        self.proposal_id = proposal_id
        self.detail = detail


class InDoubt(Error):
    """The call may have happened and nothing could tell; a person resolves it
    (``Gate.resolve``)."""

    def __init__(self, approval_id: str, effect_key: str, detail: str) -> None:
        super().__init__(f"E_IN_DOUBT: {approval_id} ({effect_key}): {detail}")
        self.approval_id = approval_id
        self.effect_key = effect_key
        self.detail = detail


class ConfigError(Error):
    """A setting, the receipt key or the trusted key set is missing or malformed."""


class Unavailable(Error):
    """The checkpoint did not answer in time, or not in its API; nothing was run."""
