"""The tool loop's one error tree, and its stable codes.

Error hierarchy::

    Error               root of everything airlock.agents raises
    ├── RunNotFound     no run with that id in the run store (E_NOT_FOUND)
    ├── NotResumable    the run is done, failed, or held by another live process
    │                   (E_NOT_PAUSED)
    ├── Fenced          another process took the run over; this one stops (E_FENCED)
    ├── ProviderError   the model's API did not answer, or not in its format (E_PROVIDER)
    └── StepLimit       the model asked for more turns than ``max_steps`` (E_STEPS)

    ToolError           not raised by the loop: a tool raises it to answer the model with
                        an error result of exactly its text (the MCP tools do)

Errors of :mod:`airlock.gate` other than ``Pending``, ``Rejected``, ``Refused``,
``EffectKeyConflict`` and ``InDoubt`` (which become tool results the model reads)
propagate unchanged, except ``Unavailable`` (the checkpoint did not answer, nothing
ran): the run pauses with no proposal, and ``resume`` calls the tool again.
"""

from __future__ import annotations

__all__ = [
    "Error",
    "Fenced",
    "NotResumable",
    "ProviderError",
    "RunNotFound",
    "StepLimit",
    "ToolError",
]


class Error(Exception):
    """Root of every error raised by :mod:`airlock.agents`; ``code`` is stable."""

    code = "E_AGENT"

    def __init__(self, detail: str) -> None:
        super().__init__(f"{self.code}: {detail}")
        self.detail = detail


class RunNotFound(Error):
    """No run with that id."""

    code = "E_NOT_FOUND"


class NotResumable(Error):
    """The run is not paused (done, failed, or running in a process whose lease holds)."""

    code = "E_NOT_PAUSED"


class Fenced(Error):
    """Another process claimed the run after this one's lease ran out; nothing is saved."""

    code = "E_FENCED"


class ProviderError(Error):
    """The model's API failed, or answered outside its documented format."""

    code = "E_PROVIDER"


class StepLimit(Error):
    """The run reached ``max_steps`` model turns; it is marked failed."""

    code = "E_STEPS"


class ToolError(Exception):
    """Raised by a tool's function: the model reads ``text`` as the call's result, with
    ``is_error`` set, whole (not cut to 300 characters, not prefixed ``E_TOOL_FAILED``).

    For a tool that already words its failure for the model, such as an MCP tool whose
    result is ``isError`` (a person rejected the call, the server refused it). Not part
    of the loop's error tree: the loop never raises it.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
