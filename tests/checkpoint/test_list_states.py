"""``GET /v1/proposals`` with ``state`` given more than once lists a proposal in any of
them, in the same order (newest first by creation, then id) and with the same ``before``
cursor as a single state; one ``state`` behaves as it always did. Every answer echoes
the state filter it applied (``states``), so a client can tell it from an older
checkpoint's, which keeps only the last ``state``. On both databases."""

from __future__ import annotations

from typing import Any

from .harness import World


def _four(world: World) -> dict[str, str]:
    """A proposal in each of pending, approved, rejected and pending again, one a second
    apart, newest last: ``{label: id}``."""
    ids = {}
    for n, label in enumerate(("approved", "rejected", "pending", "newest")):
        p = world.submit(proposal_id=f"prop_list{n:08d}", resource_id=f"i-list{n}").json()
        ids[label] = p["id"]
        if label == "approved":
            assert world.approve("alice", p["id"], p["action_hash"]).json()["state"] == label
        if label == "rejected":
            r = world.client.post(
                f"/v1/proposals/{p['id']}/reject",
                json={"reason_code": "other", "note": "no"},
                headers=world.auth("bob"),
            )
            assert r.json()["state"] == label
        world.clock.advance(1)
    return ids


def _list(world: World, params: Any) -> Any:
    r = world.client.get("/v1/proposals", params=params, headers=world.auth("alice"))
    assert r.status_code == 200, r.text
    return r.json()


def test_several_states_list_a_proposal_in_any_of_them_newest_first(world: World) -> None:
    ids = _four(world)
    page = _list(world, [("state", "rejected"), ("state", "approved")])
    assert [p["id"] for p in page["items"]] == [ids["rejected"], ids["approved"]]
    assert page["next_before"] is None
    three = _list(world, [("state", "pending"), ("state", "approved"), ("state", "rejected")])
    assert [p["id"] for p in three["items"]] == [
        ids["newest"],
        ids["pending"],
        ids["rejected"],
        ids["approved"],
    ]


def test_several_states_page_with_the_before_cursor(world: World) -> None:
    ids = _four(world)
    states = [("state", "pending"), ("state", "approved"), ("state", "rejected")]
    first = _list(world, [*states, ("limit", 2)])
    assert [p["id"] for p in first["items"]] == [ids["newest"], ids["pending"]]
    assert first["next_before"] == ids["pending"]
    rest = _list(world, [*states, ("limit", 2), ("before", first["next_before"])])
    assert [p["id"] for p in rest["items"]] == [ids["rejected"], ids["approved"]]
    assert rest["next_before"] is None


def test_one_state_lists_as_before(world: World) -> None:
    ids = _four(world)
    assert [p["id"] for p in _list(world, {"state": "pending"})["items"]] == [
        ids["newest"],
        ids["pending"],
    ]
    assert len(_list(world, {})["items"]) == 4


def test_an_unknown_state_among_several_is_refused(world: World) -> None:
    r = world.client.get(
        "/v1/proposals",
        params=[("state", "pending"), ("state", "deleted")],
        headers=world.auth("alice"),
    )
    assert (r.status_code, r.json()["error"]["code"]) == (422, "E_INVALID")


def test_the_answer_echoes_the_states_it_filtered_on_sorted_and_once_each(
    world: World,
) -> None:
    ids = _four(world)
    asked = [("state", "rejected"), ("state", "pending"), ("state", "rejected")]
    page = _list(world, asked)
    assert page["states"] == ["pending", "rejected"]
    assert [p["id"] for p in page["items"]] == [ids["newest"], ids["pending"], ids["rejected"]]
    # Every page of it, the cursor's too.
    rest = _list(world, [*asked, ("limit", 1), ("before", ids["pending"])])
    assert rest["states"] == ["pending", "rejected"]
    assert [p["id"] for p in rest["items"]] == [ids["rejected"]]


def test_one_state_echoes_itself_and_no_filter_echoes_null(world: World) -> None:
    _four(world)
    assert _list(world, {"state": "approved"})["states"] == ["approved"]
    unfiltered = _list(world, {})
    assert "states" in unfiltered
    assert unfiltered["states"] is None
