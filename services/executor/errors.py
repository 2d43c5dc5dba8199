"""The executor's one error tree.

Error hierarchy::

    ExecutorError            root of everything services.executor raises
    ├── ConfigError          refusing to start: bad key file mode, failpoints outside dev, ...
    ├── SimulatedCrash       raised by a test failpoint to abandon work mid-flight
    ├── ResolutionError      a human resolution was refused (row not in_doubt, bad input)
    ├── ResendRefused        a request to send receipts again was refused as a whole
    │                        (unknown approval, nothing rejected to send, bad input)
    ├── InvalidReceipt       a receipt does not verify or is not a receipt/v1
    ├── LedgerHeld           a ledger hold is in force (the ledger may have gone back):
    │                        nothing is consumed or recorded; present the bundle later
    └── CheckpointUnauthorized
                             the checkpoint answered 401/403 to the executor's token: a
                             misconfiguration that retrying cannot fix, so the daemon stops

:class:`Fenced` (a conditional ledger update matched zero rows: another worker took the
lease over) is the ledger's, :class:`airlock.ledger.Fenced`, and is named here too.

A bundle that is refused is not an error here: it is an outcome (``Outcome`` with a
``RefusalCode``), recorded in the ledger and the audit chain like any other.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from airlock.ledger import Fenced

__all__ = [
    "CheckpointUnauthorized",
    "ConfigError",
    "ExecutorError",
    "Fenced",
    "InvalidReceipt",
    "LedgerHeld",
    "OperatorRefusal",
    "ResendRefused",
    "ResolutionError",
    "SimulatedCrash",
    "recordable",
]


class OperatorRefusal(enum.StrEnum):
    """Why an operator's request (``executor resolve``, ``executor receipts resend``) was
    refused: stable codes, printed and recorded in the audit chain with the refusal."""

    E_INVALID = "E_INVALID"  # malformed input: no or bad approval id, empty --by, long note
    E_NOT_FOUND = "E_NOT_FOUND"  # no ledger row (or no receipt) for the approval id
    E_NOT_IN_DOUBT = "E_NOT_IN_DOUBT"  # a resolution of a row that is not in_doubt
    E_ALREADY_RESOLVED = "E_ALREADY_RESOLVED"  # the row carries a resolution already
    E_NOT_REJECTED = "E_NOT_REJECTED"  # a resend of receipts none of which was rejected
    E_NOT_DELIVERED = "E_NOT_DELIVERED"  # a redelivery of receipts none of which was delivered
    E_CONFLICT = "E_CONFLICT"  # another request queued the same attempt meanwhile


class ExecutorError(Exception):
    """Root of every error raised by :mod:`services.executor`."""


class ConfigError(ExecutorError):
    """The executor refuses to start with this configuration."""


class SimulatedCrash(ExecutorError):
    """Raised at a failpoint by in-process tests; never raised unless a test installs it."""

    def __init__(self, point: str) -> None:
        super().__init__(f"simulated crash at {point}")
        self.point = point


def recordable(text: str, limit: int = 120) -> str:
    """Operator input as a refusal's audit event holds it: printable ASCII as it is, the
    rest ``ascii()``-escaped, at most ``limit`` characters.

    Not :func:`airlock.text.inert`, the form shown to people: this goes into the hash
    chain, whose events keep the form they were written in, and ``ascii()`` escapes the
    backslash too, so what was given can be read back exactly (``\\u202e`` typed is not
    U+202E given). Shown, it is printable already and reads the same."""
    shown = text if text.isascii() and text.isprintable() else ascii(text)[1:-1]
    return shown if len(shown) <= limit else shown[: limit - 1] + "~"


class ResolutionError(ExecutorError):
    """A human resolution of an in_doubt row was refused (recorded in the audit chain)."""

    def __init__(self, code: OperatorRefusal, message: str) -> None:
        super().__init__(message)
        self.code = code


class ResendRefused(ExecutorError):
    """A request to send receipts again (rejected ones, or delivered ones after a
    checkpoint restore) was refused; nothing was queued.

    ``problems`` names each approval id (or option) at fault and why, every one of them:
    an operator fixes them all at once rather than one per try.
    """

    def __init__(self, code: OperatorRefusal, problems: Sequence[tuple[str, str]]) -> None:
        self.code = code
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{subject}: {why}" for subject, why in self.problems))


class InvalidReceipt(ExecutorError):
    """A receipt's envelope, signature or payload is not valid."""


class LedgerHeld(ExecutorError):
    """A ledger hold is in force until ``until`` (``executor_ledger_holds``): this ledger
    may have gone back and forgotten approvals it used, so none is consumed before then.
    Not a refusal: nothing is recorded, and the same bundle may be presented later."""

    def __init__(self, until: int) -> None:
        super().__init__(
            f"a ledger hold is in force until {until} (this ledger may have forgotten "
            "approvals it used; see executor.ledger_behind in its audit chain): nothing "
            "is consumed before then"
        )
        self.until = until


class CheckpointUnauthorized(ExecutorError):
    """The checkpoint refused the executor's service token (HTTP 401 or 403)."""

    def __init__(self, status: int, code: str, what: str) -> None:
        super().__init__(
            f"the checkpoint refused the executor token on {what} (HTTP {status} {code}): "
            "check AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN is an executor-role service token"
        )
        self.status = status
        self.code = code
