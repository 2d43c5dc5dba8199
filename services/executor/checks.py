"""The pure checks on a consumed approval and on live state: no clock read, no I/O.

(14) :func:`precondition_problem` compares live state with the signed precondition;
recovery's probe asks :func:`effect_visible`; :func:`no_longer_valid` and
:func:`reissue_blocked` say why a write may not happen now; :func:`client_token` is the
ECS idempotency token a re-issued delete carries.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container
from typing import Final

from airlock.cloud.ports import LiveState
from airlock.cloud.tags import ProductionTags
from airlock.protocol import ProposedAction, RefusalCode

from .models import Work

__all__ = [
    "client_token",
    "effect_visible",
    "no_longer_valid",
    "precondition_problem",
    "reissue_blocked",
]

_STOPPED: Final = frozenset({"Stopping", "Stopped"})
_RFC3339_UTC: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def client_token(approval_id: str) -> str:
    """The ECS ``ClientToken`` for an approval: deterministic, so a re-issue after an
    unknown outcome is deduplicated by the provider (ECS allows 64 ASCII characters)."""
    digest = hashlib.sha256(b"airlock.executor/client-token/v1\x00" + approval_id.encode())
    return "airlock-" + digest.hexdigest()[:48]


def precondition_problem(
    action: ProposedAction, live: LiveState | None, production: ProductionTags | None = None
) -> str | None:
    """(14) Why live state no longer matches the signed precondition, or None if it does.

    With ``production``, a production tag now on the resource also stops the write: the
    agent never proposes a production resource, so one there now was added after the
    state the approval rests on was observed. It only ever refuses more.
    """
    if live is None:
        return f"{action.resource.type} {action.resource.id} no longer exists"
    if (live.resource_type, live.resource_id) != (action.resource.type, action.resource.id):
        return "the provider answered for a different resource"
    want = action.precondition
    if live.status != want.status:
        return f"status is {live.status!r}, the approval requires {want.status!r}"
    # A protect tag counts in any case, as a key or as a value (``note=Airlock:Protect``),
    # which is how the agent reads protection when it proposes; refusing more is safe.
    absent = {tag.casefold() for tag in want.absent_tags}
    present = sorted(
        key if key.casefold() in absent else f"{key}={value}"
        for key, value in live.tags.items()
        if key.casefold() in absent or value.casefold() in absent
    )
    if present:
        return f"protected tag(s) now present: {', '.join(present)}"
    marked = None if production is None else production.match(live.tags)
    if marked is not None:
        return f"production tag now present: {marked[0]}={marked[1]}"
    if action.operation == "delete":
        # Stopped now is not "stayed stopped" (docs/architecture.md#staged-clean-up): an instance
        # someone started after the agent observed it stopped, and stopped again, may be in use.
        # Deletes only; both times are "YYYY-MM-DDTHH:MM:SSZ", so they compare as text.
        started = live.started_at
        if _RFC3339_UTC.fullmatch(started) is None:
            return (
                "the provider reports no last start time: cannot establish that it "
                "stayed stopped since it was observed"
            )
        # ECS gives StartTime to the minute: a start in the observation's own minute may
        # have come after it, so that minute counts as after.
        if started[:16] >= want.observed_at[:16]:
            return (
                f"started at {started}, not before the minute the state this approval rests "
                f"on was observed ({want.observed_at})"
            )
    return None


def effect_visible(action: ProposedAction, live: LiveState | None) -> bool:
    """Does live state show the operation's effect (docs/protocol.md#recovery verify-first)?"""
    if action.operation == "delete":
        return live is None
    if action.operation == "stop":
        return live is not None and live.status in _STOPPED
    return False


def no_longer_valid(
    work: Work, now: int, revoked: Container[str]
) -> tuple[RefusalCode, str] | None:
    """Why a consumed approval may not be written any more (expired, revoked), or None."""
    if now >= work.expires_at:
        return RefusalCode.E_EXPIRED, f"expired at {work.expires_at} before the write"
    if work.approval_id in revoked:
        return RefusalCode.E_REVOKED, "revoked before the write"
    return None


def reissue_blocked(
    work: Work,
    live: LiveState | None,
    now: int,
    revoked: Container[str],
    production: ProductionTags | None,
) -> str | None:
    """Why an ECS delete may not be re-issued now, or None if it may."""
    late = no_longer_valid(work, now, revoked)
    if late is not None:
        return late[1]
    return precondition_problem(work.action, live, production)
