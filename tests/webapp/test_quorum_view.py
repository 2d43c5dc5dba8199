"""The page counts what the checkpoint counts.

A vote by someone disabled or no longer an approver stays on record but no longer
counts toward the quorum (the checkpoint says so per vote); a late in_doubt outcome on
a proposal whose target was taken again names the newer proposal.
"""

from __future__ import annotations

from .conftest import make_site
from .fakes import action_value


def test_a_vote_that_no_longer_counts_is_marked_and_not_counted() -> None:
    site = make_site()
    with site.client:
        site.sign_in()
        record = site.fake.add(action_value())
        record["votes"].append({"voter": "mallory", "at": 1, "note": "", "counts": False})
        html = site.client.get(f"/proposals/{record['id']}").text
    assert ">0 of 1" in html
    assert "does not count" in html and "mallory" in html


def test_a_late_outcome_names_the_proposal_that_holds_the_target() -> None:
    site = make_site()
    with site.client:
        site.sign_in()
        record = site.fake.add(action_value())
        site.fake.in_doubt(record["id"])
        record["state"] = "revoked"
        record["outcome"]["late"] = True
        record["outcome"]["target_held_by"] = "prop_newer00000001"
        html = site.client.get(f"/proposals/{record['id']}").text
    assert '<a href="/proposals/prop_newer00000001">prop_newer00000001</a>' in html
    assert "so this proposal stays" in html


def test_an_unresolved_late_in_doubt_can_be_resolved_from_the_page() -> None:
    """The proposal kept its closed state (the target was taken again), but the
    checkpoint still accepts a resolution of its in_doubt outcome: offer the form."""
    site = make_site()
    with site.client:
        site.sign_in("admin")
        record = site.fake.add(action_value())
        site.fake.in_doubt(record["id"])
        record["state"] = "revoked"
        record["outcome"]["target_held_by"] = "prop_newer00000001"
        html = site.client.get(f"/proposals/{record['id']}").text
        assert 'id="resolve-form"' in html
        record["outcome"]["resolution"] = "did_not_happen"
        resolved = site.client.get(f"/proposals/{record['id']}").text
    assert 'id="resolve-form"' not in resolved
