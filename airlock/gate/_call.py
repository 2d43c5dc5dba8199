"""One guarded function and one call of it: the arguments bound, the tool call built.

A guard (:class:`Guard`) is what ``Gate.guard`` records for a function: its tool name,
risk, and the callables that name the target, the effect key, the premises and the
summary of a call. :meth:`Guard.bind` turns the arguments of one call into a
:class:`BoundCall` — the strict-JSON ``arguments`` of the tool call (no floats: an
amount is an integer in minor units or a string) and the values the callables give.
Pure: no I/O, no clock read; the premises are read by the caller, when it needs them.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import ValidationError

from airlock.protocol import ToolCall, canonical_bytes

from .errors import Change

__all__ = [
    "IDEMPOTENCY_KEY",
    "BoundCall",
    "Guard",
    "changed",
    "json_value",
    "proposal_id_of",
    "same_json",
]

#: The parameter that receives the effect key, when the function has it.
IDEMPOTENCY_KEY: Final = "idempotency_key"

Risk = Literal["low", "medium", "high"]
#: A guard's ``target``, ``effect_key`` and ``summary``: a constant, or a function of the
#: call's arguments.
Named = str | Callable[..., str]


def json_value(value: Any, where: str) -> Any:
    """``value`` as strict JSON (docs/protocol.md#strict-json): dicts with str keys,
    lists (tuples become lists), str, int, bool and None. A float, or anything else, is
    a TypeError: it is never sent, rounded or stringified on the caller's behalf."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        raise TypeError(f"{where} is a float; use an integer (minor units) or a string")
    if isinstance(value, list | tuple):
        return [json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has a key that is not a string: {key!r}")
            out[key] = json_value(item, f"{where}.{key}")
        return out
    raise TypeError(f"{where} is a {type(value).__name__}, not a JSON value")


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON (RFC 8785 bytes): ``True`` is not ``1`` here, as it is in Python."""
    return canonical_bytes(a) == canonical_bytes(b)


def changed(was: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[Change, ...]:
    """The names whose values differ as JSON, sorted; one absent on a side reads None.
    What moved among a call's premises, or what a person's edit changed."""
    return tuple(
        Change(name, was.get(name), now.get(name))
        for name in sorted({*was, *now})
        if name not in was or name not in now or not same_json(was[name], now[name])
    )


def proposal_id_of(audience: str, effect_key: str) -> str:
    """The proposal id of an effect at a gate: the same call finds the same proposal."""
    digest = hashlib.sha256(f"airlock.gate/v1\n{audience}\n{effect_key}".encode()).hexdigest()
    return "prop_" + digest[:40]


@dataclass(frozen=True, slots=True)
class BoundCall:
    """One call: what the function receives, and what the tool call names."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    arguments: dict[str, Any]
    target: str
    effect_key: str
    summary: str

    def same_as(self, tool: str, call: ToolCall) -> bool:
        """Does ``call`` name this call: the same tool, arguments, target and effect key?"""
        return (
            call.tool == tool
            and call.target == self.target
            and call.effect_key == self.effect_key
            and same_json(call.arguments, self.arguments)
        )


@dataclass(frozen=True, slots=True)
class Guard:
    """A guarded function and how to name each call of it (see ``Gate.guard``)."""

    fn: Callable[..., Any]
    tool: str
    risk: Risk
    target: Named
    effect_key: Named
    premises: Callable[..., Mapping[str, Any]] | None
    lookup: Callable[[str], bool] | None
    summary: Named | None
    wait: float
    #: May an approver's edit of a call's arguments run (with the edited arguments)?
    editable: bool
    #: The function's signature without ``idempotency_key``: what a caller passes.
    signature: inspect.Signature
    accepts_key: bool
    is_async: bool

    @classmethod
    def of(
        cls,
        fn: Callable[..., Any],
        *,
        tool: str | None,
        risk: Risk,
        target: Named,
        effect_key: Named,
        premises: Callable[..., Mapping[str, Any]] | None,
        lookup: Callable[[str], bool] | None,
        summary: Named | None,
        wait: float,
        editable: bool = False,
    ) -> Guard:
        if risk not in ("low", "medium", "high"):
            raise ValueError(f"risk must be low, medium or high, not {risk!r}")
        if wait < 0:
            raise ValueError("wait must not be negative")
        signature = inspect.signature(fn)
        params = signature.parameters
        accepts_key = IDEMPOTENCY_KEY in params
        if accepts_key and params[IDEMPOTENCY_KEY].kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            raise TypeError(f"{IDEMPOTENCY_KEY} must be a keyword parameter")
        caller = signature.replace(
            parameters=[p for name, p in params.items() if name != IDEMPOTENCY_KEY]
        )
        return cls(
            fn=fn,
            tool=tool or fn.__name__,
            risk=risk,
            target=target,
            effect_key=effect_key,
            premises=premises,
            lookup=lookup,
            summary=summary,
            wait=float(wait),
            editable=editable,
            signature=caller,
            accepts_key=accepts_key,
            is_async=inspect.iscoroutinefunction(fn),
        )

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> BoundCall:
        """Bind one call's arguments, or raise TypeError (a missing or extra argument, a
        float, a value that is not JSON) before anything is sent."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if self.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(value)
            else:
                arguments[name] = value
        arguments = json_value(arguments, "arguments")
        call_args, call_kwargs = tuple(bound.args), dict(bound.kwargs)

        def named(value: Named, what: str) -> str:
            out = value(*call_args, **call_kwargs) if callable(value) else value
            if not isinstance(out, str):
                raise TypeError(f"{what} must be a str, not {type(out).__name__}")
            return out

        target = named(self.target, "target")
        effect_key = named(self.effect_key, "effect_key")
        summary = (
            f"{self.tool} on {target}" if self.summary is None else named(self.summary, "summary")
        )
        if self.accepts_key:
            call_kwargs[IDEMPOTENCY_KEY] = effect_key
        return BoundCall(call_args, call_kwargs, arguments, target, effect_key, summary)

    def edited(self, call: BoundCall, approved: ToolCall) -> BoundCall:
        """The call a person's edit made of ``call``: ``approved``'s arguments, bound.

        Raises:
            ValueError: this guard takes no edits, or ``approved`` is not an edit of
                ``call``: another tool, target or effect key, or arguments the function
                does not take (they are bound by name, as keyword arguments).
        """
        if not self.editable:
            raise ValueError("a person edited the call and this guard takes no edits")
        if approved.tool != self.tool:
            raise ValueError(f"the approved call is of {approved.tool}, not {self.tool}")
        try:
            edited = self.bind((), dict(approved.arguments))
        except Exception as exc:  # a target or effect key function may raise anything
            raise ValueError(f"the edited arguments do not fit {self.tool}: {exc}") from None
        if edited.target != call.target or approved.target != call.target:
            raise ValueError("the edit changes the call's target")
        if edited.effect_key != call.effect_key or approved.effect_key != call.effect_key:
            raise ValueError("the edit changes the call's effect key")
        if not same_json(edited.arguments, approved.arguments):
            raise ValueError(f"the edited arguments do not bind to {self.tool} as they are")
        return edited

    def read_premises(self, call: BoundCall) -> dict[str, Any]:
        """The premises as they are now (empty without a ``premises`` function)."""
        if self.premises is None:
            return {}
        kwargs = {k: v for k, v in call.kwargs.items() if k != IDEMPOTENCY_KEY}
        value = json_value(self.premises(*call.args, **kwargs), "premises")
        if not isinstance(value, dict):
            raise TypeError("premises must be a mapping of names to JSON scalars")
        return value

    def tool_call(
        self, call: BoundCall, *, proposal_id: str, audience: str, proposed_by: str, now: int
    ) -> ToolCall:
        """The ``airlock.tool-call/v1`` of this call, premises read now; ValueError
        (``E_INVALID``) when a field is not valid (a target with spaces, a long key)."""
        try:
            return ToolCall.model_validate(
                {
                    "type": "airlock.tool-call/v1",
                    "proposal_id": proposal_id,
                    "tool": self.tool,
                    "arguments": call.arguments,
                    "target": call.target,
                    "effect_key": call.effect_key,
                    "premises": self.read_premises(call),
                    "risk": self.risk,
                    "summary": call.summary,
                    "audience": audience,
                    "proposed_by": proposed_by,
                    "created_at": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "tool call"
            raise ValueError(f"E_INVALID: {where}: {err['msg']}") from None
