"""A refused request's ``E_INVALID`` message names the field and the limit in plain words.

pydantic's wording reached people as it was (``note: Value should have at most 2000 items
after validation``): a note is not a list, and "after validation" means nothing to a
reader. Each shape of mistake is checked, and none echoes what was submitted.
"""

from __future__ import annotations

from typing import Any

import pytest

from .harness import World

#: (what is wrong, the body or query, the message expected).
_BODIES = [
    ("a note over its limit", {"note": "x" * 2001}, "note is too long: at most 2000 characters"),
    (
        "a hash over its limit",
        {"action_hash": "y" * 81},
        "action_hash is too long: at most 80 characters",
    ),
    ("no hash", {"action_hash": None}, "action_hash must be text"),
    ("a missing hash", {}, "action_hash is required"),
    (
        "a field of another request",
        {"reason_code": "other"},
        "reason_code is not a field of this request",
    ),
    ("a number for text", {"action_hash": 5}, "action_hash must be text"),
    ("a NUL in a note", {"note": "a\x00b"}, "note holds a NUL or a lone surrogate character"),
]


@pytest.mark.parametrize(("what", "change", "expected"), _BODIES, ids=[c[0] for c in _BODIES])
def test_an_invalid_approve_body_is_refused_in_plain_words(
    world: World, what: str, change: dict[str, Any], expected: str
) -> None:
    p = world.submit().json()
    body = {"action_hash": p["action_hash"], **change}
    if change == {}:
        body = {}
    r = world.client.post(
        f"/v1/proposals/{p['id']}/approve", json=body, headers=world.auth("alice")
    )
    assert r.status_code == 422, what
    assert r.json()["error"] == {"code": "E_INVALID", "message": expected}


def test_an_unknown_reject_reason_names_the_reasons(world: World) -> None:
    p = world.submit().json()
    r = world.client.post(
        f"/v1/proposals/{p['id']}/reject",
        json={"reason_code": "bored"},
        headers=world.auth("alice"),
    )
    message = r.json()["error"]["message"]
    assert message.startswith("reason_code must be one of 'not_idle', 'protected'"), message
    assert "bored" not in message


def test_an_empty_user_name_and_a_body_that_is_no_object_are_named(world: World) -> None:
    empty = world.client.post("/v1/sessions", json={"username": "", "password": "x"})
    assert empty.json()["error"]["message"] == "username must not be empty"
    listed = world.client.post("/v1/sessions", json=["alice"])
    assert listed.json()["error"]["message"] == "the request body must be a JSON object"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("limit=abc", "limit must be a whole number"),
        ("limit=0", "limit must be at least 1"),
        ("state=bogus", "state must be one of 'pending'"),
    ],
)
def test_an_invalid_query_is_refused_in_plain_words(
    world: World, query: str, expected: str
) -> None:
    r = world.client.get(f"/v1/proposals?{query}", headers=world.auth("alice"))
    assert r.status_code == 422
    assert r.json()["error"]["message"].startswith(expected), r.json()


def test_a_garbage_proposal_id_is_described_never_echoed(world: World) -> None:
    garbage = "prop_" + "<x>" * 1000
    r = world.client.get(f"/v1/proposals/{garbage}", headers=world.auth("alice"))
    message = r.json()["error"]["message"]
    assert (
        message == "proposal_id must be a proposal id (prop_ and 8 to 80 letters, digits, _ or -)"
    )
