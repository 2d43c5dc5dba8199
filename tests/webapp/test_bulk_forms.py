"""The bulk decision's pages and forms, over a fake checkpoint.

What the browser test (test_bulk_review.py) does not reach: a high-risk proposal is never
offered for a bulk decision and one sent by hand is refused by the server, a mixed
selection sends nothing, a forged form sends nothing, and the queue's total is the sum
of the savings signed in the action texts (a row whose text does not hash to its hash
counts as without an estimate, whatever its parsed copy says).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from airlock.protocol import monthly_minor

from .conftest import Site
from .fakes import action_value


def _priced(n: int, micros: int, **kwargs: Any) -> dict[str, Any]:
    value = action_value(
        proposal_id=f"prop_fakebulk{n:04d}", resource_id=f"i-t4n0bulk{n:04d}", **kwargs
    )
    value["evidence"]["saving"] = {
        "currency": "USD",
        "monthly_minor": monthly_minor(micros, "USD"),
        "hourly_price_micros": micros,
        "hours_per_month": 730,
        "basis": "compute",
        "source": "ecs:DescribePrice",
    }
    return value


def _total(html: str) -> str:
    match = re.search(r'<strong id="queue-savings-total">([^<]*)</strong>', html)
    assert match is not None, "the queue shows no total"
    return match.group(1)


def test_the_queue_total_is_the_sum_of_the_signed_savings(site: Site) -> None:
    prices = (113000, 186000, 24000, 438000, 113000)
    for n, micros in enumerate(prices):
        site.fake.add(_priced(n, micros))
    site.fake.add(_priced(7, 113000), state="executed")  # not pending: not in the total
    site.fake.add(action_value(proposal_id="prop_fakebulk0009", resource_id="i-t4n0bulk0009"))
    site.sign_in()
    html = site.client.get("/").text
    cents = sum(monthly_minor(m, "USD") for m in prices)
    assert _total(html) == f"USD {cents // 100:,}.{cents % 100:02d}"
    assert "Pending: 6 proposals, 1 without an estimate" in html


def test_the_queue_total_counts_an_rds_stops_signed_saving(site: Site) -> None:
    site.fake.add(_priced(1, 113000))
    rds = _priced(2, 250000)
    rds["resource"] = {"type": "rds.instance", "id": "rm-t4n0bulk0002"}
    rds["params"] = {}
    rds["evidence"]["saving"]["source"] = "rds:DescribePrice"
    site.fake.add(rds)
    site.sign_in()
    html = site.client.get("/").text
    cents = monthly_minor(113000, "USD") + monthly_minor(250000, "USD")
    assert _total(html) == f"USD {cents // 100:,}.{cents % 100:02d}"
    assert "Pending: 2 proposals</td>" in html  # none without an estimate


def test_a_saving_that_is_not_in_the_signed_text_is_not_counted(site: Site) -> None:
    """The record's parsed copy claims a saving its hashed text does not carry."""
    site.fake.add(_priced(1, 113000))
    plain = site.fake.add(action_value(proposal_id="prop_fakebulk0002"))
    plain["action"] = copy.deepcopy(site.fake.proposals["prop_fakebulk0001"]["action"])
    site.sign_in()
    html = site.client.get("/").text
    assert _total(html) == "USD 82.49"
    assert "1 without an estimate" in html


def test_a_high_risk_proposal_has_no_checkbox_and_is_left_out_of_a_review(site: Site) -> None:
    site.fake.add(_priced(1, 113000))
    site.fake.add(_priced(2, 113000, operation="delete"))
    site.sign_in()
    html = site.client.get("/").text
    assert 'value="prop_fakebulk0001" aria-label' in html
    assert 'value="prop_fakebulk0002" aria-label' not in html
    review = site.client.get("/bulk?id=prop_fakebulk0001&id=prop_fakebulk0002").text
    assert 'id="left-out"' in review and "it is high risk" in review
    assert review.count('name="item"') == 2  # the stop only, in each of the two forms


def test_a_high_risk_proposal_sent_by_hand_in_a_bulk_approve_is_refused(site: Site) -> None:
    delete = site.fake.add(_priced(2, 113000, operation="delete"))
    site.sign_in()
    response = site.client.post(
        "/bulk/approve",
        data={
            "csrf_token": site.csrf(),
            "item": [f"{delete['id']} {delete['action_hash']}"],
            "operation": "stop",
            "risk": "medium",
        },
    )
    assert response.status_code == 200
    assert "it is high risk" in response.text
    assert site.fake.calls == []


def test_a_forged_bulk_approve_without_the_csrf_token_sends_nothing(site: Site) -> None:
    stop = site.fake.add(_priced(1, 113000))
    site.sign_in()
    response = site.client.post(
        "/bulk/approve",
        data={
            "item": [f"{stop['id']} {stop['action_hash']}"],
            "operation": "stop",
            "risk": "medium",
        },
    )
    assert response.status_code == 403
    assert site.fake.calls == []


def test_a_stale_hash_in_a_bulk_approve_is_refused_by_the_checkpoint(site: Site) -> None:
    stop = site.fake.add(_priced(1, 113000))
    other = site.fake.add(_priced(2, 113000))
    site.sign_in()
    response = site.client.post(
        "/bulk/approve",
        data={
            "csrf_token": site.csrf(),
            "item": [
                f"{stop['id']} {other['action_hash']}",
                f"{other['id']} {other['action_hash']}",
            ],
            "operation": "stop",
            "risk": "medium",
        },
    )
    assert "Approved 1 of 2" in response.text
    assert "E_STALE_VIEW" in response.text
    assert site.fake.proposals[stop["id"]]["state"] == "pending"
    assert site.fake.proposals[other["id"]]["state"] == "approved"


def test_a_bulk_reject_rejects_each_with_the_reason(site: Site) -> None:
    records = [site.fake.add(_priced(n, 113000)) for n in range(3)]
    site.sign_in()
    response = site.client.post(
        "/bulk/reject",
        data={
            "csrf_token": site.csrf(),
            "item": [f"{r['id']} {r['action_hash']}" for r in records],
            "operation": "stop",
            "risk": "medium",
            "reason_code": "not_idle",
        },
    )
    assert "Rejected 3 of 3" in response.text
    assert [c[0] for c in site.fake.calls] == ["reject"] * 3
    assert all(site.fake.proposals[r["id"]]["state"] == "rejected" for r in records)


def test_a_selection_of_two_risks_is_refused_and_sends_nothing(site: Site) -> None:
    site.fake.add(_priced(1, 113000))
    site.fake.add(_priced(2, 113000))["risk"] = "low"
    site.sign_in()
    review = site.client.get("/bulk?id=prop_fakebulk0001&id=prop_fakebulk0002")
    assert review.status_code == 422
    assert "one operation and one risk" in review.text
    assert 'name="item"' not in review.text
    assert site.fake.calls == []


def test_the_proposal_page_shows_its_signed_saving(site: Site) -> None:
    site.fake.add(_priced(1, 113000))
    site.sign_in()
    html = site.client.get("/proposals/prop_fakebulk0001").text
    assert '<dd id="saving">USD 82.49 (estimate: its compute price stops' in html


def test_a_bulk_approve_after_the_session_ended_sends_nothing_and_returns_to_the_queue(
    site: Site,
) -> None:
    stop = site.fake.add(_priced(1, 113000))
    site.sign_in()
    token = site.csrf()
    site.fake.sessions.clear()  # ended at the checkpoint (expired, or signed out elsewhere)
    response = site.client.post(
        "/bulk/approve",
        data={
            "csrf_token": token,
            "item": [f"{stop['id']} {stop['action_hash']}"],
            "operation": "stop",
            "risk": "medium",
        },
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=%2F"
    assert site.fake.calls == []
