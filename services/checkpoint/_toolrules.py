"""The tool-call parts of a policy file: argument conditions and per-tool settings. Not
public: :mod:`services.checkpoint.policy` reads them.

An argument condition compares one top-level argument of a tool call with a value the
file gives: ``{name = "amount", op = ">", value = 10000}``. Integers and strings only;
an argument that is absent, or of another type than the value, never matches, whatever
the operator (``!=`` included): a rule that asks about an amount says nothing about a
call without one. Pure: nothing here does I/O.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["REASON_PATTERN", "TOOL_PATTERN", "ArgCondition", "parse_arguments", "parse_tools"]

#: A reject reason code (models.REASON_CODE_SHAPE says the same to the database).
REASON_PATTERN: Final = re.compile(r"[a-z][a-z0-9_]{0,39}")
#: A tool's name, as ``airlock.protocol.ToolCall`` takes it.
TOOL_PATTERN: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_ORDERED: Final[dict[str, Callable[[Any, Any], bool]]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
_OPS: Final = ("==", "!=", *_ORDERED, "in")
_MAX_CONDITIONS: Final = 16
_MAX_IN: Final = 64
_MAX_REASONS: Final = 16


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same_type(left: Any, right: Any) -> bool:
    return (_is_int(left) and _is_int(right)) or (isinstance(left, str) and isinstance(right, str))


@dataclass(frozen=True, slots=True)
class ArgCondition:
    """``arguments[name] op value``; False when the argument is absent or of another type."""

    name: str
    op: str
    value: int | str | tuple[int | str, ...]

    def holds(self, arguments: Mapping[str, Any]) -> bool:
        if self.name not in arguments:
            return False
        actual = arguments[self.name]
        if self.op == "in":
            assert isinstance(self.value, tuple)  # parse_arguments made it one
            return any(_same_type(actual, v) and actual == v for v in self.value)
        if not _same_type(actual, self.value):
            return False
        if self.op == "==":
            return bool(actual == self.value)
        if self.op == "!=":
            return bool(actual != self.value)
        return _ORDERED[self.op](actual, self.value)


def _scalar(value: Any) -> bool:
    return _is_int(value) or isinstance(value, str)


def parse_arguments(rule: str, value: Any) -> tuple[ArgCondition, ...]:
    """``match.arguments``: a list of ``{name, op, value}``, or refuse naming ``rule``."""
    if value is None:
        return ()
    if not isinstance(value, list) or not 1 <= len(value) <= _MAX_CONDITIONS:
        raise ValueError(
            f"{rule}: match.arguments must be a list of 1 to {_MAX_CONDITIONS} "
            "{name = ..., op = ..., value = ...}"
        )
    conditions = []
    for cond in value:
        if not isinstance(cond, dict) or set(cond) != {"name", "op", "value"}:
            raise ValueError(f"{rule}: each match.arguments entry has exactly name, op and value")
        name, op, operand = cond["name"], cond["op"], cond["value"]
        if not isinstance(name, str) or not 1 <= len(name) <= 128:
            raise ValueError(f"{rule}: an argument name is a string of 1 to 128 characters")
        if op not in _OPS:
            raise ValueError(f"{rule}: argument {name!r}: op must be one of {' '.join(_OPS)}")
        if op == "in":
            if (
                not isinstance(operand, list)
                or not 1 <= len(operand) <= _MAX_IN
                or not all(_scalar(v) for v in operand)
            ):
                raise ValueError(
                    f"{rule}: argument {name!r}: 'in' takes a list of 1 to {_MAX_IN} "
                    "integers or strings"
                )
            operand = tuple(operand)
        elif op in _ORDERED and not _is_int(operand):
            raise ValueError(f"{rule}: argument {name!r}: {op} compares integers only")
        elif not _scalar(operand):
            raise ValueError(f"{rule}: argument {name!r}: the value is an integer or a string")
        conditions.append(ArgCondition(name, op, operand))
    return tuple(conditions)


def parse_tools(value: Any) -> dict[str, tuple[str, ...]]:
    """``[tools.<tool>]`` tables: the reject reasons each tool adds, or refuse."""
    if not isinstance(value, dict):
        raise TypeError("tools is a table of [tools.<tool>] tables")
    reasons: dict[str, tuple[str, ...]] = {}
    for tool, table in value.items():
        if not TOOL_PATTERN.fullmatch(tool):
            raise ValueError(f"tools.{tool}: not a tool name a tool call can carry")
        if not isinstance(table, dict) or set(table) - {"reject_reasons"}:
            raise ValueError(f"tools.{tool}: only reject_reasons may be set")
        codes = table.get("reject_reasons", [])
        if (
            not isinstance(codes, list)
            or len(codes) > _MAX_REASONS
            or not all(isinstance(c, str) and REASON_PATTERN.fullmatch(c) for c in codes)
        ):
            raise ValueError(
                f"tools.{tool}: reject_reasons is a list of at most {_MAX_REASONS} codes, "
                "each 1 to 40 of a-z, 0-9 and _, a letter first"
            )
        reasons[tool] = tuple(dict.fromkeys(codes))
    return reasons
