"""The checkpoint's one error tree and its stable refusal codes.

Error hierarchy::

    CheckpointError          root of everything the checkpoint raises on purpose
    ├── Refusal              a request was refused; carries an ErrorCode and an HTTP status
    └── ConfigError          the service cannot start (bad policy, bad key file, bad settings)

Codes are part of the API contract (the web app and the CLI map them to messages):
never rename or reuse one. A refusal's message is for people and never holds a secret.

Retired, never to be reused: ``E_LOCKED`` (423, a locked account's sign-in). It told
anyone that a user name exists; a locked account is now refused like a wrong password
(``E_UNAUTHENTICATED``, see ``auth.py``).
"""

from __future__ import annotations

import enum
import logging

__all__ = ["CheckpointError", "ConfigError", "ErrorCode", "Refusal", "no_signing_key"]

_log = logging.getLogger("airlock.checkpoint")


class ErrorCode(enum.StrEnum):
    # no, unknown, expired or revoked credential; any refused sign-in, a locked account too
    E_UNAUTHENTICATED = "E_UNAUTHENTICATED"
    E_FORBIDDEN = "E_FORBIDDEN"  # authenticated, but the role may not do this
    E_INVALID = "E_INVALID"  # the request body or action is not valid
    E_NOT_FOUND = "E_NOT_FOUND"  # no such proposal / approval / user
    E_CONFLICT = "E_CONFLICT"  # same proposal id, different action hash
    E_DUPLICATE_OPEN = "E_DUPLICATE_OPEN"  # another open proposal for this resource+operation
    E_POLICY_DENIED = "E_POLICY_DENIED"  # a deny rule matched; recorded as denied
    E_STALE_VIEW = "E_STALE_VIEW"  # the approver saw a different action hash
    E_CONFIRM_REQUIRED = "E_CONFIRM_REQUIRED"  # high risk: the typed resource id is missing
    E_CONFIRM_MISMATCH = "E_CONFIRM_MISMATCH"  # high risk: the typed resource id is wrong
    E_NOTE_REQUIRED = "E_NOTE_REQUIRED"  # a rejection for reason "other" says why in a note
    E_SELF_APPROVAL = "E_SELF_APPROVAL"  # the approver is the proposer
    E_ALREADY_VOTED = "E_ALREADY_VOTED"  # one vote per person
    E_STATE = "E_STATE"  # the proposal is not in a state that allows this
    E_EXPIRED = "E_EXPIRED"  # the approval window has passed
    E_RECEIPT = "E_RECEIPT"  # an outcome's receipt does not verify or does not match
    # An executor's resolution receipt contradicts a person's resolution recorded here:
    # recorded (never lost), shown on the proposal; the same answer every time it is sent.
    E_RESOLUTION_CONFLICT = "E_RESOLUTION_CONFLICT"
    E_NO_SIGNING_KEY = "E_NO_SIGNING_KEY"  # no active signing key (all revoked or retired)
    E_BUSY = "E_BUSY"  # too many sign-ins waiting already; retry after Retry-After seconds
    # this token's requests were refused too often; retry after Retry-After seconds
    E_RATE_LIMITED = "E_RATE_LIMITED"
    E_HOST = "E_HOST"  # the Host header names none of the names this server answers to
    # Sign-ins from this client address (or for this name from it) are being slowed after
    # failures: retry after Retry-After seconds. Nothing was checked or recorded.
    E_THROTTLED = "E_THROTTLED"
    # A new password is too short, too common (the shipped blocklist) or the user name.
    E_WEAK_PASSWORD = "E_WEAK_PASSWORD"  # noqa: S105 - an error code, not a password


class CheckpointError(Exception):
    """Root of every error the checkpoint raises on purpose."""


class Refusal(CheckpointError):
    """A refused request, rendered as ``{"error": {"code": ..., "message": ...}}``."""

    def __init__(
        self, code: ErrorCode, message: str, status: int, *, retry_after: int | None = None
    ) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
        self.status = status
        #: Seconds for a ``Retry-After`` header (a refusal for load, not for the request).
        self.retry_after = retry_after


class ConfigError(CheckpointError):
    """The checkpoint must not start: the message says which file or setting and why."""


def no_signing_key(exc: ConfigError) -> Refusal:
    """E_NO_SIGNING_KEY for a key ring that cannot sign. Why it cannot (a path, a file
    mode, an OS error) goes to the log: /readyz and /v1/keys answer anyone."""
    _log.error("no usable signing key: %s", exc)
    return Refusal(
        ErrorCode.E_NO_SIGNING_KEY,
        "the checkpoint has no usable signing key; its log says why",
        503,
    )
