"""devcloud's one error type: an Alibaba Cloud API error (code, message, HTTP status)."""

from __future__ import annotations

__all__ = ["AcsError"]


class AcsError(Exception):
    """Rendered as Alibaba's error body: ``Code``, ``Message``, ``RequestId``, ``HostId``."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
