"""The protocol's one error tree, and the stable refusal codes.

Error hierarchy::

    Error                  root of everything airlock.protocol raises
    ├── Refused            a bundle, action or statement was refused; carries a RefusalCode
    ├── InvalidReceipt     a receipt's envelope, signature or payload is not valid
    └── KeySetError        a trusted key set file is malformed

Refusal codes are part of the wire contract: they appear in ledgers, audit chains,
receipts and API responses. Never rename or reuse one; add new codes at the end.
"""

from __future__ import annotations

import enum

__all__ = ["Error", "InvalidReceipt", "KeySetError", "RefusalCode", "Refused"]


class RefusalCode(enum.StrEnum):
    """Why a bundle was refused, in the order of the checks in docs/protocol.md#executor-checks."""

    E_SIZE = "E_SIZE"  # (1) bundle or action over its size cap
    E_PARSE = "E_PARSE"  # (2) not strict JSON (duplicate keys, NaN, BOM, bad UTF-8, ...)
    E_ENVELOPE = "E_ENVELOPE"  # (3) bundle/envelope shape, or payload type not exactly ours
    E_UNKNOWN_KEY = "E_UNKNOWN_KEY"  # (4) no signature names a key we trust
    E_KEY_REVOKED = "E_KEY_REVOKED"  # (4) the only matching keys are revoked or past not_after
    E_SIGNATURE = "E_SIGNATURE"  # (4) a trusted key's signature does not verify
    E_STATEMENT = "E_STATEMENT"  # (5) the signed statement is not a valid approval/v1
    E_AUDIENCE = "E_AUDIENCE"  # (6) approval addressed to another executor
    E_ACCOUNT = "E_ACCOUNT"  # (7) provider/account/region differ from this executor's binding
    E_NOT_YET_VALID = "E_NOT_YET_VALID"  # (8) now < not_before - skew
    E_EXPIRED = "E_EXPIRED"  # (8) now >= expires_at
    E_TTL = "E_TTL"  # (8) expires_at - issued_at over the maximum (or not positive)
    E_ACTION_HASH = "E_ACTION_HASH"  # (9) the presented action is not the one signed
    E_MISMATCH = "E_MISMATCH"  # (10) statement and action disagree on target or operation
    E_OPERATION = "E_OPERATION"  # (11) operation not allowlisted, or params invalid
    E_REVOKED = "E_REVOKED"  # (12) the approval was revoked
    E_REPLAY = "E_REPLAY"  # (13) the approval (nonce, id or action hash) was already consumed
    E_PRECONDITION = "E_PRECONDITION"  # (14) live state no longer matches the precondition


class Error(Exception):
    """Root of every error raised by :mod:`airlock.protocol`."""


class Refused(Error):
    """A refusal with a stable code. ``detail`` is for people and must not hold secrets."""

    def __init__(
        self,
        code: RefusalCode,
        detail: str,
        *,
        approval_id: str | None = None,
        issued_at: int | None = None,
    ) -> None:
        super().__init__(f"{code.value}: {detail}")
        self.code = code
        self.detail = detail
        #: Set only when the refusal is a property of an authenticated approval (steps 6-8
        #: and 12: its audience, account, validity window, revocation), never from
        #: unauthenticated bytes nor for refusals that depend on the presented action.
        self.approval_id = approval_id
        #: With ``approval_id``: that approval's ``issued_at`` (a caller deciding whether
        #: it may have used the approval before, as a restored ledger does, needs it).
        self.issued_at = issued_at


class KeySetError(Error):
    """A trusted key set is malformed (bad JSON, bad key, kid that does not match its key)."""


class InvalidReceipt(Error):
    """A receipt's envelope, signature or payload is not valid; the message names the
    refusal code of the envelope check or the first invalid field."""
