"""Routed proposals: who may approve them, and escalation when their SLA passes
(docs/notifications.md#routing-slas-and-escalation).

A rule with a ``route`` (:mod:`.notify.groups`) gives each proposal it decides a row in
``proposal_routes`` when it is submitted: the groups in order, the level asked so far,
and when that level's SLA passes. Only a member of a group asked so far (the current
group and the ones before it: escalation adds people, it takes no one's part away) may
vote on it, edit it, or be among the approvers of its signed approval; membership is the
policy's now, so a person taken out of a group loses the right at once. The sweeper
escalates one level at a time by a conditional update of ``level``: a second sweep, or
a second checkpoint sweeping the same database, escalates nothing twice.

Everything here runs in the caller's transaction, in ``_tx``'s order, and must never
commit, sign, or let a routed proposal be approved by someone outside its groups.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from airlock.events import CheckpointEvent

from . import _tx
from .errors import ErrorCode, Refusal
from .models import proposal_routes, proposals
from .notify import record as record_event
from .notify.config import NotifyConfig
from .notify.routed import forget
from .notify.routed import route as _route
from .policy import Decision
from .schemas import RouteOut

__all__ = [
    "UNREAD",
    "allowed",
    "carry",
    "check_signers",
    "check_voter",
    "escalate",
    "read",
    "route_of",
    "shown",
    "start",
]


def start(
    conn: Connection, notify: NotifyConfig, proposal_id: str, decision: Decision, now: int
) -> None:
    """Route a new pending proposal by its rule's ``route`` (none: nothing)."""
    route = notify.routing.routes.get(decision.rule)
    if route is None or decision.effect != "approve":
        return
    escalates = route.sla is not None and len(route.groups) > 1
    forget(conn, proposal_id)
    conn.execute(
        proposal_routes.insert().values(
            proposal_id=proposal_id,
            rule=decision.rule,
            groups=json.dumps(list(route.groups)),
            notify=json.dumps(list(route.notify)),
            sla=route.sla,
            level=0,
            due_at=now + route.sla if escalates and route.sla is not None else None,
            updated_at=now,
        )
    )


def carry(conn: Connection, old_id: str, new_id: str) -> None:
    """An edit's new proposal, routed by the same rule as the one it supersedes, keeps
    how far that one was escalated (and when its SLA passes): an edit restarts nothing."""
    old, new = _route(conn, old_id), _route(conn, new_id)
    if old is None or new is None or (old.rule, old.groups) != (new.rule, new.groups):
        return
    forget(conn, new_id)
    conn.execute(
        proposal_routes.update()
        .where(proposal_routes.c.proposal_id == new_id)
        .values(level=old.level, due_at=old.due_at)
    )


# Built once: building a statement costs more than executing it.
_ROUTES = sa.select(proposal_routes).where(
    proposal_routes.c.proposal_id.in_(sa.bindparam("ids", expanding=True))
)


def route_of(conn: Connection, proposal_id: str) -> Any:
    """The ``proposal_routes`` row of ``proposal_id`` (None: routed by no rule). Read it
    once per transaction, with the proposal row locked (nothing then moves its level),
    and pass it to :func:`check_voter` and :func:`check_signers` (a second read in the
    transaction is answered from :mod:`.notify.routed`'s memo)."""
    return _route(conn, proposal_id)


def allowed(
    conn: Connection, notify: NotifyConfig, proposal_id: str
) -> tuple[list[str], frozenset[str]] | None:
    """``(groups asked so far, their members now)`` for a routed proposal; None if it is
    routed to no group (any approver may approve it; its rule may name only channels)."""
    route = _route(conn, proposal_id)
    return None if route is None else _asked(notify, route)


def _asked(notify: NotifyConfig, route: Any) -> tuple[list[str], frozenset[str]] | None:
    asked = list(json.loads(route.groups)[: route.level + 1])
    if not asked:
        return None
    groups = notify.routing.groups
    members = frozenset(m for name in asked if name in groups for m in groups[name].members)
    return asked, members


def read(conn: Connection, proposal_ids: Collection[str]) -> Mapping[str, Any]:
    """The ``proposal_routes`` rows of ``proposal_ids`` by proposal id, in one query (a
    proposal routed by no rule has none)."""
    if not proposal_ids:
        return {}
    rows = conn.execute(_ROUTES, {"ids": list(proposal_ids)}).all()
    return {row.proposal_id: row for row in rows}


def shown(notify: NotifyConfig, route: Any, viewer: str | None) -> RouteOut | None:
    """A proposal's route as the API shows it to ``viewer`` (a principal's name; None:
    to no one in particular, who may not vote): None when it is routed to no group."""
    found = None if route is None else _asked(notify, route)
    if found is None:
        return None
    return RouteOut(
        groups=json.loads(route.groups),
        level=route.level,
        sla=route.sla,
        due_at=route.due_at,
        may_vote=viewer is not None and viewer in found[1],
    )


def _refuse(who: str, asked: list[str]) -> Refusal:
    return Refusal(
        ErrorCode.E_FORBIDDEN,
        f"{who} is in none of the groups this proposal is routed to ({', '.join(asked)})",
        403,
    )


#: ``route=`` not given: the check reads the route itself.
UNREAD: Any = object()


def check_voter(
    conn: Connection, notify: NotifyConfig, proposal_id: str, name: str, *, route: Any = UNREAD
) -> None:
    """Refuse (403 ``E_FORBIDDEN``) a vote or an edit of a routed proposal by ``name``
    when they are in none of its groups asked so far. ``route``: its row as
    :func:`route_of` read it in this transaction (not given: read here)."""
    if route is UNREAD:
        route = _route(conn, proposal_id)
    found = None if route is None else _asked(notify, route)
    if found is not None and name not in found[1]:
        raise _refuse(name, found[0])


def check_signers(
    conn: Connection,
    notify: NotifyConfig,
    proposal_id: str,
    approvers: Iterable[str],
    *,
    route: Any = UNREAD,
) -> None:
    """Refuse (403 ``E_FORBIDDEN``) to sign a routed proposal's approval when one of
    ``approvers`` is, now, in none of its groups asked so far (a policy reloaded since
    they voted took them out): nothing is signed. ``route``: as for :func:`check_voter`."""
    if route is UNREAD:
        route = _route(conn, proposal_id)
    found = None if route is None else _asked(notify, route)
    if found is None:
        return
    for name in approvers:
        if name not in found[1]:
            raise Refusal(
                ErrorCode.E_FORBIDDEN,
                f"not signed: approver {name} is in none of the groups this proposal is "
                f"routed to ({', '.join(found[0])})",
                403,
            )


def escalate(conn: Connection, notify: NotifyConfig, now: int) -> int:
    """Escalate every pending routed proposal whose SLA passed by one level: the
    route's ``level`` moved (a conditional update), ``checkpoint.proposal.escalated``
    audited, ``proposal.escalated`` sent to the groups asked so far. Locks the rows it
    changes before its first audit append (``_tx``'s order). Returns how many."""
    due = conn.execute(
        sa.select(proposal_routes)
        .select_from(
            proposal_routes.join(proposals, proposals.c.id == proposal_routes.c.proposal_id)
        )
        .where(
            proposal_routes.c.due_at <= now,
            proposals.c.state == "pending",
            proposals.c.approval_deadline > now,
        )
        .order_by(proposal_routes.c.proposal_id)
        .with_for_update(of=proposals)
    ).all()
    count = 0
    for route in due:
        groups = json.loads(route.groups)
        level = route.level + 1
        more = level + 1 < len(groups) and route.sla is not None
        forget(conn, route.proposal_id)
        moved = conn.execute(
            proposal_routes.update()
            .where(
                proposal_routes.c.proposal_id == route.proposal_id,
                proposal_routes.c.level == route.level,
            )
            .values(level=level, due_at=now + route.sla if more else None, updated_at=now)
        ).rowcount
        if moved != 1:  # another sweeper took it first
            continue
        _tx.audit(
            conn,
            now,
            CheckpointEvent.PROPOSAL_ESCALATED,
            proposal_id=route.proposal_id,
            rule=route.rule,
            from_group=groups[route.level],
            to_group=groups[level],
            level=level,
            sla=route.sla,
        )
        record_event(conn, notify, route.proposal_id, "proposal.escalated", now, step=level)
        count += 1
    return count
