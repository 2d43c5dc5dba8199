"""The loop's values: tools, the provider-neutral conversation, and a run's outcome.

A conversation is a list of :class:`Message`: the task (``user``), the model's turns
(``assistant``, text and :class:`Call` s) and one ``tool`` message per call with its
result. Providers translate it to and from their wire format; the run store keeps it as
JSON. Frozen values, no I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = ["Call", "Done", "Message", "Paused", "Reply", "Risk", "Tool"]

#: A tool name both chat APIs accept (OpenAI's function names; Anthropic's tool names).
_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

Named = str | Callable[..., str]


class Risk(enum.StrEnum):
    """What calling a tool can do. ``SENSITIVE`` tools go through the gate."""

    SAFE = "safe"  # reads, lookups: run as the model asks
    SENSITIVE = "sensitive"  # an effect: runs once a person approved this very call


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call.

    Args:
        name: the name the model calls it by (``[A-Za-z0-9_-]``, at most 64).
        description: what it does, for the model.
        fn: called with the model's arguments as keyword arguments; returns a str, or a
            JSON value the model reads as JSON text.
        parameters: the JSON Schema of its arguments (an ``object`` schema).
        risk: :attr:`Risk.SAFE` (the default) or :attr:`Risk.SENSITIVE`.
        level, target, effect_key, premises, lookup, summary: for a sensitive tool,
            what ``Gate.guard`` takes (docs/gate.md#use): ``level`` is the gate's risk
            (``low``, ``medium``, ``high``); ``target`` and ``effect_key`` are required.
        editable: for a sensitive tool, whether a person may edit the call's arguments
            before approving it (the default): the function then receives the edited
            arguments and the model reads what was changed with the result.

    Raises:
        ValueError: a name the APIs refuse, a sensitive tool without target or effect
            key, or gate options on a safe tool.
    """

    name: str
    description: str
    fn: Callable[..., Any]
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    risk: Risk = Risk.SAFE
    level: Literal["low", "medium", "high"] = "high"
    target: Named | None = None
    effect_key: Named | None = None
    premises: Callable[..., Mapping[str, Any]] | None = None
    lookup: Callable[[str], bool] | None = None
    summary: Named | None = None
    editable: bool = True

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"E_CONFIG: tool name {self.name!r} is not [A-Za-z0-9_-]{{1,64}}")
        if self.parameters.get("type") != "object":
            raise ValueError(f"E_CONFIG: tool {self.name}: parameters must be an object schema")
        gated = (self.target, self.effect_key, self.premises, self.lookup, self.summary)
        if self.risk is Risk.SENSITIVE:
            if self.target is None or self.effect_key is None:
                raise ValueError(f"E_CONFIG: sensitive tool {self.name} needs target, effect_key")
        elif any(option is not None for option in gated):
            raise ValueError(f"E_CONFIG: tool {self.name} is safe: gate options do not apply")


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call the model asked for: the provider's id, the tool, its arguments."""

    id: str
    name: str
    arguments: dict[str, Any]

    def to_value(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> Call:
        return cls(str(value["id"]), str(value["name"]), dict(value["arguments"]))


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation.

    ``user``: ``text``. ``assistant``: ``text`` (may be empty) and ``calls``. ``tool``:
    ``call_id`` (the call it answers), ``text`` (the result) and ``is_error``.
    """

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    calls: tuple[Call, ...] = ()
    call_id: str | None = None
    is_error: bool = False

    def to_value(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "text": self.text,
            "calls": [c.to_value() for c in self.calls],
            "call_id": self.call_id,
            "is_error": self.is_error,
        }

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> Message:
        role = value["role"]
        if role not in ("user", "assistant", "tool"):
            raise ValueError(f"E_STATE: message role {role!r}")
        return cls(
            role=role,
            text=str(value["text"]),
            calls=tuple(Call.from_value(c) for c in value["calls"]),
            call_id=value["call_id"],
            is_error=bool(value["is_error"]),
        )


@dataclass(frozen=True, slots=True)
class Reply:
    """What a provider returns: the model's next turn (no calls: the run is done)."""

    text: str = ""
    calls: tuple[Call, ...] = ()


@dataclass(frozen=True, slots=True)
class Paused:
    """The run waits for a person's decision on ``proposal_id`` (decide at ``url``);
    ``Agent.resume(run_id)`` continues it. ``proposal_id`` is None when the checkpoint
    did not answer (``Unavailable``): resume retries the call."""

    run_id: str
    tool: str
    call_id: str
    proposal_id: str | None
    url: str | None


@dataclass(frozen=True, slots=True)
class Done:
    """The run ended: the model's last text."""

    run_id: str
    text: str
