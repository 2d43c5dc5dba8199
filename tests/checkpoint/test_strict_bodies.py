"""Every request body the checkpoint takes is parsed strictly (docs/protocol.md#strict-json).

FastAPI reads a declared body with ``json.loads``, which keeps the last of two duplicate
keys: an approve with a decoy ``action_hash`` first and the real one last was taken as
the real one (seen in review). A body that is not strict JSON is 422 ``E_INVALID``
naming the strict parser's code, before the caller is even authenticated, and nothing
is recorded: no vote, no session, no audit row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from services.checkpoint.models import metadata

from .harness import PASSWORD, World, approved, signed_receipt

#: (route, who calls it, a valid body for a fresh proposal) per route with a JSON body.
_Case = Callable[[World], tuple[str, str | None, dict[str, Any]]]


def _approve(world: World) -> tuple[str, str | None, dict[str, Any]]:
    p = world.submit().json()
    return f"/v1/proposals/{p['id']}/approve", "alice", {"action_hash": p["action_hash"]}


def _reject(world: World) -> tuple[str, str | None, dict[str, Any]]:
    p = world.submit().json()
    return f"/v1/proposals/{p['id']}/reject", "alice", {"reason_code": "other", "note": "n"}


def _revoke(world: World) -> tuple[str, str | None, dict[str, Any]]:
    p, _ = approved(world)
    return f"/v1/proposals/{p['id']}/revoke", "alice", {"note": "stop it"}


def _withdraw(world: World) -> tuple[str, str | None, dict[str, Any]]:
    p = world.submit().json()
    return f"/v1/proposals/{p['id']}/withdraw", "agent", {"note": "running again"}


def _resolve(world: World) -> tuple[str, str | None, dict[str, Any]]:
    p = world.submit().json()
    return f"/v1/proposals/{p['id']}/resolve", "admin", {"decision": "happened", "note": "n"}


def _outcome(world: World) -> tuple[str, str | None, dict[str, Any]]:
    p, aid = approved(world)
    receipt = signed_receipt(aid, p["action_hash"], "succeeded", at=world.clock())
    return "/v1/outcomes", "executor", {"receipt": receipt}


def _refusal(world: World) -> tuple[str, str | None, dict[str, Any]]:
    _, aid = approved(world)
    receipt = signed_receipt(aid, None, "refused", refusal_code="E_AUDIENCE", at=world.clock())
    return "/v1/refusals", "executor", {"receipt": receipt}


def _login(world: World) -> tuple[str, str | None, dict[str, Any]]:
    return "/v1/sessions", None, {"username": "alice", "password": PASSWORD}


_CASES: dict[str, _Case] = {
    "approve": _approve,
    "reject": _reject,
    "revoke": _revoke,
    "withdraw": _withdraw,
    "resolve": _resolve,
    "outcomes": _outcome,
    "refusals": _refusal,
    "sessions": _login,
}


def _ambiguous(body: dict[str, Any]) -> dict[str, bytes]:
    """The valid body made ambiguous four ways; its first key carries each."""
    key, *_ = body
    rest = json.dumps({k: v for k, v in body.items() if k != key})[1:]
    tail = ("," + rest) if rest != "}" else "}"
    real = json.dumps(body)
    opening = '{"' + key + '":'
    return {
        # A decoy first, the real value last: json.loads reads the real one.
        "duplicate key": (opening + '"decoy",' + real[1:]).encode(),
        "NaN": (opening + "NaN" + tail).encode(),
        "lone surrogate": (opening + '"\\ud800"' + tail).encode(),
        "trailing data": (real + " {}").encode(),
    }


def _state(world: World) -> dict[str, Any]:
    """Every row of every checkpoint table: nothing may change."""
    with world.checkpoint.engine.connect() as conn:
        return {
            name: sorted(map(repr, conn.execute(sa.select(table)).all()))
            for name, table in metadata.tables.items()
        }


@pytest.mark.parametrize("route", sorted(_CASES))
def test_an_ambiguous_body_is_refused_with_no_side_effect_not_read_last_wins(
    world: World, route: str
) -> None:
    path, who, body = _CASES[route](world)
    headers = {"Content-Type": "application/json", **(world.auth(who) if who else {})}
    before = _state(world)
    for what, raw in _ambiguous(body).items():
        response = world.client.post(path, content=raw, headers=headers)
        assert response.status_code == 422, (what, response.text)
        error = response.json()["error"]
        assert error["code"] == "E_INVALID", (what, error)
        assert error["message"].startswith("E_PARSE: "), (what, error)
        assert _state(world) == before, what
    # The same body, unambiguous, is taken as ever (or refused for what it says).
    response = world.client.post(path, content=json.dumps(body).encode(), headers=headers)
    assert response.status_code in (200, 201, 409), response.text
    if route != "resolve":  # the proposal is not in_doubt: 409, nothing to resolve
        assert response.status_code in (200, 201), response.text
