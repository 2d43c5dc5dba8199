"""The ledger's one error tree.

Error hierarchy::

    Error        root of everything airlock.ledger raises
    └── Fenced   a conditional ledger update matched zero rows: another worker took the
                 lease over (epoch bumped) or the state moved on; this worker must stop

A replay is not an error here: :func:`airlock.ledger.consume` returns False, and the
caller records the refusal.
"""

from __future__ import annotations

__all__ = ["Error", "Fenced"]


class Error(Exception):
    """Root of every error raised by :mod:`airlock.ledger`."""


class Fenced(Error):
    """This worker no longer owns the row (lease taken over, or state moved on)."""

    def __init__(self, approval_id: str, transition: str) -> None:
        super().__init__(f"{approval_id}: {transition} matched no row; the lease is lost")
        self.approval_id = approval_id
        self.transition = transition
