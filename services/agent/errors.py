"""The agent's one error tree.

Error hierarchy::

    AgentError                 root of everything the agent raises on purpose
    ├── ConfigError            the agent cannot start (missing token, account, region)
    ├── ScanError              the cloud could not be read; the run is incomplete
    └── CheckpointError        the checkpoint answered in a way the agent cannot act on
        ├── CheckpointUnavailable   still down after the bounded retries
        └── CheckpointRefused       a 4xx the agent does not expect (carries the code)

A refusal the agent expects (policy denied, another open proposal, same id with another
hash) is a result, not an error: see :class:`services.agent.client.SubmitResult`. The two
checkpoint errors are also :mod:`airlock.apiclient`'s, whose core the agent's client wraps.
"""

from __future__ import annotations

from airlock import apiclient

__all__ = [
    "AgentError",
    "CheckpointError",
    "CheckpointRefused",
    "CheckpointUnavailable",
    "ConfigError",
    "ScanError",
]


class AgentError(Exception):
    """Root of every error the agent raises on purpose."""


class ConfigError(AgentError):
    pass


class ScanError(AgentError):
    pass


class CheckpointError(AgentError):
    pass


class CheckpointUnavailable(CheckpointError, apiclient.CheckpointUnavailable):
    """Transport errors or 5xx on every attempt (nothing can be said about the last one),
    or an answer that is not strict JSON (docs/protocol.md#strict-json) or not the shape
    :mod:`airlock.api` gives it: not the checkpoint API."""


class CheckpointRefused(CheckpointError, apiclient.CheckpointRefused):
    """A refusal the agent does not expect: ``status``, ``code``, ``message``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        apiclient.CheckpointRefused.__init__(self, code, message, status)
        self.args = (f"HTTP {status} {code}: {message}",)
