"""A refused request's validation errors in plain words, for the ``E_INVALID`` message.

pydantic's own wording ("Value should have at most 2000 items after validation") is
written for programmers and names a length check as a list's; a person reading the CLI
or the web app needs the field and the limit. Never a byte of the submitted value: a
password or a 3,000-character id is not echoed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["plain_invalid"]

#: What a field matched against a pattern must look like, for the fields that have one.
_FORMS: Final = {
    "proposal_id": "a proposal id (prop_ and 8 to 80 letters, digits, _ or -)",
    "before": "a proposal id (prop_ and 8 to 80 letters, digits, _ or -)",
    "account": "an id of up to 128 letters, digits and . _ : @ / -",
    "proposed_by": "an id of up to 128 letters, digits and . _ : @ / -",
}

_BOUNDS: Final = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
}

_TYPES: Final = {
    "string_type": "must be text",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "missing": "is required",
    "extra_forbidden": "is not a field of this request",
    "json_invalid": "is not valid JSON",
}


def _field(loc: Sequence[Any]) -> str:
    names = [str(part) for part in loc if isinstance(part, str)]
    if names and names[0] in ("body", "path", "query", "header", "cookie"):
        kind, names = names[0], names[1:]
    else:
        kind = ""
    if names:
        return ".".join(names)
    return "the request body" if kind == "body" else "the request"


def _unit(value: Any, limit: int) -> str:
    if isinstance(value, str | bytes):
        return "character" if limit == 1 else "characters"
    return "item" if limit == 1 else "items"


def _problem(error: Mapping[str, Any], field: str) -> str:
    kind = str(error.get("type", ""))
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind in ("too_long", "string_too_long") and isinstance(ctx.get("max_length"), int):
        limit = ctx["max_length"]
        return f"is too long: at most {limit} {_unit(value, limit)}"
    if kind in ("too_short", "string_too_short") and isinstance(ctx.get("min_length"), int):
        limit = ctx["min_length"]
        if limit == 1:
            return "must not be empty"
        return f"is too short: at least {limit} {_unit(value, limit)}"
    if kind in ("literal_error", "enum") and ctx.get("expected"):
        return f"must be one of {ctx['expected']}"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return f"must be {words} {ctx.get(key)}"
    if kind == "string_pattern_mismatch":
        return f"must be {_FORMS.get(field.rsplit('.', 1)[-1], 'in the expected form')}"
    if kind == "value_error" and ctx.get("error") is not None:
        return str(ctx["error"])
    return _TYPES.get(kind, "is not valid")


def plain_invalid(errors: Sequence[Mapping[str, Any]]) -> str:
    """The first error of pydantic's ``errors()`` as "FIELD PROBLEM", in plain words.

    Args:
        errors: pydantic's (or FastAPI's) error dicts; only ``type``, ``loc`` and
            ``ctx`` are read, never ``input`` beyond its type.

    Returns:
        One line such as ``note is too long: at most 2000 characters``; "the request is
        not valid" for an empty list.
    """
    if not errors:
        return "the request is not valid"
    first = errors[0]
    field = _field(first.get("loc") or ())
    return f"{field} {_problem(first, field)}"
