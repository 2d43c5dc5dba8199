"""A person's own notification preference: which events reach them, and where
(docs/notifications.md#preferences), and its routes, ``/v1/me/notifications``.

Only a signed-in person reads or sets their own, never anyone else's. A personal Slack
URL is a secret: it is kept, used by the delivery worker (:mod:`.notify.people`), and
shown back only as its host and last four characters. Storing is audited by nothing
but the row's ``updated_at``: a preference decides where news goes, never what may be
approved.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Final

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import IntegrityError

from .auth import Principal
from .errors import ErrorCode, Refusal
from .models import NOTIFY_KINDS, notify_prefs
from .notify.config import NotifyConfig
from .notify.people import slack_url_allowed
from .routes import Caller, _StrictJSONRoute
from .service import Checkpoint

__all__ = ["NotifyPrefsIn", "NotifyPrefsOut", "clear", "read", "router", "store"]

_EMAIL: Final = r"^[^@\s\x00-\x1f\x7f]{1,64}@[A-Za-z0-9.-]{1,189}\.[A-Za-z]{2,63}$"
_URL: Final = r"^https://[!-~]{1,492}$"
_KIND: Final = "^(" + "|".join(re.escape(k) for k in NOTIFY_KINDS) + ")$"


class NotifyPrefsIn(BaseModel):
    """What a person sets: the events they want (none: nothing reaches them), and where."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    events: Annotated[
        list[Annotated[str, Field(pattern=_KIND)]], Field(max_length=len(NOTIFY_KINDS))
    ]
    #: An address for email; null: no email.
    email: Annotated[str | None, Field(max_length=254, pattern=_EMAIL)] = None
    #: A personal Slack incoming-webhook URL (https, on a host ``[notify.people]
    #: slack_hosts`` allows, else 403 ``E_FORBIDDEN``); null: none, unless
    #: ``keep_slack_url``.
    slack_url: Annotated[str | None, Field(max_length=500, pattern=_URL)] = None
    #: Keep the stored Slack URL (the page never holds it to send it back).
    keep_slack_url: bool = False


class NotifyPrefsOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    #: False: no preference stored; the person takes their groups' default.
    set: bool
    events: list[str]
    email: str | None
    #: The stored Slack URL's host and last four characters, never the URL.
    slack: str | None
    #: Every event kind one may choose.
    kinds: list[str]
    #: The groups of the policy the person is in.
    groups: list[str]
    #: Whether this checkpoint sends people their own notifications at all
    #: (``[notify.people]``), and their email (``email_via``).
    delivered: bool
    email_delivered: bool


def _person(principal: Principal) -> str:
    if principal.kind != "user":
        raise Refusal(ErrorCode.E_FORBIDDEN, "only a person has notification preferences", 403)
    return principal.name


def _masked(url: str | None) -> str | None:
    if not url:
        return None
    host = url.split("//", 1)[-1].split("/", 1)[0]
    return f"{host} …{url[-4:]}"


def read(cp: Checkpoint, principal: Principal) -> NotifyPrefsOut:
    """The caller's preference as stored (the Slack URL masked)."""
    name = _person(principal)
    notify: NotifyConfig = cp.policy.notify
    with cp.engine.connect() as conn:
        row = conn.execute(sa.select(notify_prefs).where(notify_prefs.c.username == name)).first()
    people = notify.routing.people
    return NotifyPrefsOut(
        set=row is not None,
        events=[] if row is None else list(json.loads(row.events)),
        email=None if row is None else row.email,
        slack=None if row is None else _masked(row.slack_url),
        kinds=list(NOTIFY_KINDS),
        groups=sorted(g.name for g in notify.routing.groups.values() if name in g.members),
        delivered=people.enabled,
        email_delivered=people.enabled and people.email_via is not None,
    )


def store(cp: Checkpoint, principal: Principal, body: NotifyPrefsIn) -> NotifyPrefsOut:
    """Set the caller's preference, replacing any (the body's shape was checked at
    parse: kinds, an address, an https URL); refuse (403 ``E_FORBIDDEN``) a Slack URL
    on a host the policy does not allow."""
    name = _person(principal)
    people = cp.policy.notify.routing.people
    url = body.slack_url
    if url is not None and not slack_url_allowed(url, people):
        raise Refusal(
            ErrorCode.E_FORBIDDEN,
            f"slack_url: the policy allows personal Slack URLs on {', '.join(people.slack_hosts)}",
            403,
        )
    events = [k for k in NOTIFY_KINDS if k in body.events]
    email = body.email
    now = cp.now()
    values: dict[str, Any] = {"events": json.dumps(events), "email": email, "updated_at": now}
    if url is not None or not body.keep_slack_url:
        values["slack_url"] = url
    with cp.engine.begin() as conn:
        done = conn.execute(
            notify_prefs.update().where(notify_prefs.c.username == name).values(**values)
        ).rowcount
        if done == 0:
            try:
                with conn.begin_nested():
                    conn.execute(
                        notify_prefs.insert().values(username=name, **{"slack_url": None, **values})
                    )
            except IntegrityError:  # set at the same moment from another tab
                conn.execute(
                    notify_prefs.update().where(notify_prefs.c.username == name).values(**values)
                )
    return read(cp, principal)


def clear(cp: Checkpoint, principal: Principal) -> None:
    """Forget the caller's preference: they take their groups' default again."""
    name = _person(principal)
    with cp.engine.begin() as conn:
        conn.execute(notify_prefs.delete().where(notify_prefs.c.username == name))


router = APIRouter(route_class=_StrictJSONRoute)


def _service(request: Request) -> Checkpoint:
    service: Checkpoint = request.app.state.checkpoint
    return service


@router.get("/v1/me/notifications", tags=["sessions"])
def get_prefs(request: Request, caller: Caller) -> NotifyPrefsOut:
    """The signed-in person's notification preference (a Slack URL shown masked)."""
    return read(_service(request), caller)


@router.put("/v1/me/notifications", tags=["sessions"])
def put_prefs(request: Request, caller: Caller, body: NotifyPrefsIn) -> NotifyPrefsOut:
    """Set which events reach the signed-in person, and where."""
    return store(_service(request), caller, body)


@router.delete("/v1/me/notifications", status_code=204, tags=["sessions"])
def delete_prefs(request: Request, caller: Caller) -> Response:
    """Forget the preference: the person takes their routed groups' default again."""
    clear(_service(request), caller)
    return Response(status_code=204)
