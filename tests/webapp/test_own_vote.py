"""Someone who already approved is shown their vote, not the Approve form again.

The checkpoint allows one approve vote per person (E_ALREADY_VOTED), so the page says
when they approved and how many more votes are needed instead of offering a form that
can only be refused. Rejecting stays offered: the checkpoint lets any approver reject a
pending proposal, their own earlier vote or not.
"""

from __future__ import annotations

from .conftest import Site
from .fakes import NOW, action_value

DELETE = "/proposals/prop_fakedel001"


def _vote(site: Site, voter: str, at: int = NOW - 120) -> None:
    record = site.fake.proposals["prop_fakedel001"]
    record["votes"].append({"voter": voter, "at": at, "note": ""})
    record["votes_needed"] = record["policy"]["quorum"] - len(record["votes"])


def test_after_approving_the_page_shows_the_vote_and_what_is_still_needed_not_the_form(
    site: Site,
) -> None:
    site.sign_in("alice")
    site.fake.add(action_value(operation="delete", proposal_id="prop_fakedel001"))
    _vote(site, "alice")
    html = site.client.get(DELETE).text
    assert 'id="my-vote"' in html
    assert "You approved this at 2025-11-29 07:04:40 UTC" in html
    assert "1 more vote is needed, from someone else" in html
    assert 'id="approve-form"' not in html and 'id="confirm"' not in html
    assert 'id="reject-form"' in html  # the checkpoint still takes a reject from them


def test_someone_else_who_has_not_voted_still_gets_the_approve_form(site: Site) -> None:
    site.sign_in("bob")
    site.fake.add(action_value(operation="delete", proposal_id="prop_fakedel001"))
    _vote(site, "alice")
    html = site.client.get(DELETE).text
    assert 'id="approve-form"' in html and 'id="confirm"' in html
    assert 'id="my-vote"' not in html


def test_rejecting_after_ones_own_approve_vote_reaches_the_checkpoint(site: Site) -> None:
    site.sign_in("alice")
    site.fake.add(action_value(operation="delete", proposal_id="prop_fakedel001"))
    _vote(site, "alice")
    token = site.csrf(DELETE)
    site.client.post(
        f"{DELETE}/reject", data={"csrf_token": token, "reason_code": "other", "note": "no"}
    )
    assert site.fake.calls == [("reject", "alice", {"reason_code": "other", "note": "no"})]
