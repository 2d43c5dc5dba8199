"""An approver's edit of a tool call, as a pure function: the new call it makes, the id of
the proposal that carries it, and the record of what changed.

Nothing signed changes in place: an edit makes a new ``airlock.tool-call/v1`` with new
values for some of the old one's top-level ``arguments`` and everything else kept (tool,
target, effect key, premises, risk, summary, audience, proposed_by), proposed anew at
``now`` under a new id. The lifecycle (:meth:`.service.Checkpoint.edit`) withdraws the old
proposal and records the new one in one transaction.

The new id is ``"prop_" + hex(SHA-256("airlock.edit/v1\\n" + old id + "\\n" + basis
hash))[:40]``, where the basis is the old call with only the new argument values in it
(its ``proposal_id`` and ``created_at`` still the old ones): the id depends on what was
edited to what, never on the clock, so a retried edit names the proposal the first one
made. (The new call's own hash cannot be in its id: the id is inside what is hashed.)

Pure: no I/O, no clock read; refusals are :class:`.errors.Refusal` ``E_INVALID``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from airlock.protocol import Refused, ToolCall, action_hash, canonical_bytes

from .errors import ErrorCode, Refusal

__all__ = ["EDIT_ID_DOMAIN", "MAX_SET", "Edited", "edit_id", "edited_call", "record"]

#: The domain tag of an edited proposal's id (module docstring).
EDIT_ID_DOMAIN: Final = "airlock.edit/v1"
#: The most arguments one edit may set (EditIn takes no more).
MAX_SET: Final = 64


@dataclass(frozen=True, slots=True)
class Edited:
    """An edit applied: the new call, its canonical bytes and hash, and the changes
    (``{"argument", "was", "now"}`` each, in the call's argument order)."""

    call: ToolCall
    canonical: bytes
    digest: str
    changes: list[dict[str, Any]]


def _json_type(value: Any) -> str:
    # bool before int: True is an int to Python, never to JSON.
    for kind, name in ((bool, "boolean"), (int, "integer"), (str, "string")):
        if isinstance(value, kind):
            return name
    if value is None:
        return "null"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__  # a float or worse: never equal to a JSON type above


def edit_id(old_id: str, basis_hash: str) -> str:
    """The id of the proposal an edit of ``old_id`` to the basis ``basis_hash`` makes."""
    text = f"{EDIT_ID_DOMAIN}\n{old_id}\n{basis_hash}".encode()
    return "prop_" + hashlib.sha256(text).hexdigest()[:40]


def _invalid(message: str) -> Refusal:
    return Refusal(ErrorCode.E_INVALID, message, 422)


def _validated(value: Mapping[str, Any]) -> ToolCall:
    # Not PARSED_STRICTLY: the new values came through the API's body parser, which
    # does not ask for NFC, so the model checks floats, NFC and the caps itself.
    try:
        return ToolCall.model_validate(dict(value))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "tool call"
        raise _invalid(f"the edited call is not a valid tool call: {where}: {err['msg']}") from None


def edited_call(old: ToolCall, values: Mapping[str, Any], *, now: int) -> tuple[str, Edited]:
    """Apply ``values`` (argument name → new value) to ``old``: ``(new id, edited)``.

    Raises:
        Refusal: ``E_INVALID`` when ``values`` is empty or over :data:`MAX_SET`, names an
            argument ``old`` does not have, gives one a value of another JSON type, changes
            nothing, or makes a call that is not valid (NFC, size caps).
    """
    if not 1 <= len(values) <= MAX_SET:
        raise _invalid(f"set 1 to {MAX_SET} arguments")
    arguments = dict(old.arguments)
    changes = []
    for name, was in old.arguments.items():  # the call's order: the record reads like it
        if name not in values:
            continue
        now_value = values[name]
        if _json_type(now_value) != _json_type(was):
            raise _invalid(
                f"argument {name!r} is {_json_type(was)}; an edit keeps its type, "
                f"not {_json_type(now_value)}"
            )
        if canonical_bytes(now_value) != canonical_bytes(was):
            changes.append({"argument": name, "was": was, "now": now_value})
        arguments[name] = now_value
    if any(name not in arguments for name in values):
        # Not echoed: the name is the sender's to know; only existing arguments are edited.
        raise _invalid("set names an argument this tool call does not have")
    if not changes:
        raise _invalid("the edit changes no argument's value")
    base = old.model_dump(mode="json")
    basis = _validated({**base, "arguments": arguments})
    try:
        new_id = edit_id(old.proposal_id, basis.action_hash())
        call = _validated(
            {
                **basis.model_dump(mode="json"),
                "proposal_id": new_id,
                "created_at": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
        canonical = call.canonical_bytes()
    except Refused as exc:  # over the tool call's size cap
        raise _invalid(f"the edited call is refused: {exc.code.value}: {exc.detail}") from None
    return new_id, Edited(call, canonical, action_hash(canonical), changes)


def record(*, supersedes: str, by: str, note: str, at: int, changes: list[dict[str, Any]]) -> str:
    """The ``proposals.edit`` column of the new proposal: JSON of the edit."""
    value = {"supersedes": supersedes, "by": by, "note": note, "at": at, "changes": changes}
    # ASCII: a NUL in a value is escaped, never a NUL that PostgreSQL text refuses.
    return json.dumps(value, sort_keys=True, ensure_ascii=True)
