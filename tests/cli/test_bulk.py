"""airlock approvals approve|reject ID ID…: one confirmation, one vote per hash.

Against a real checkpoint over HTTP (no executor here; tests/cli/test_bulk_e2e.py runs
the whole stack). Each vote carries the hash the confirmation listed; one proposal that
left pending meanwhile is refused alone and named; a high-risk or mixed selection is
refused before anything is sent. The list shows each signed saving and the pending total.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from airlock.protocol import monthly_minor
from tests.checkpoint.builders import action_value

from .conftest import Served


def _submit(
    served: Served, n: int, *, hourly_micros: int | None = None, **kwargs: Any
) -> dict[str, Any]:
    value = action_value(
        **{"proposal_id": f"prop_bulk{n:08d}", "resource_id": f"i-t4n0bulk{n:04d}", **kwargs}
    )
    if hourly_micros is not None:
        value["evidence"]["saving"] = {
            "currency": "USD",
            "monthly_minor": monthly_minor(hourly_micros, "USD"),
            "hourly_price_micros": hourly_micros,
            "hours_per_month": 730,
            "basis": "compute",
            "source": "ecs:DescribePrice",
        }
    response = served.world.client.post(
        "/v1/proposals",
        content=json.dumps(value).encode(),
        headers={**served.world.auth("agent"), "Content-Type": "application/json"},
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _statement_hash(record: dict[str, Any]) -> str:
    payload = json.loads(base64.b64decode(record["approval"]["envelope"]["payload"]))
    value: str = payload["action_hash"]
    return value


def _withdraw(served: Served, proposal_id: str) -> None:
    response = served.world.client.post(
        f"/v1/proposals/{proposal_id}/withdraw",
        json={"note": "running again"},
        headers=served.world.auth("agent"),
    )
    assert response.status_code == 200, response.text


def test_several_ids_are_approved_each_with_its_own_vote_and_hash(served: Served) -> None:
    proposals = [_submit(served, n, hourly_micros=113000) for n in range(5)]
    served.login("alice")
    result = served.run("approvals", "approve", *(p["id"] for p in proposals), "--yes")
    assert result.exit_code == 0, result.output
    for p in proposals:
        assert p["action_hash"] in result.output  # the confirmation listed every hash
        record = served.proposal(p["id"])
        assert record["state"] == "approved"
        assert [v["voter"] for v in record["votes"]] == ["alice"]
        assert _statement_hash(record) == p["action_hash"]
    assert "in this decision: 5 proposals, est. USD 412.45 a month saved" in result.output
    assert "approve: 5 of 5 decided" in result.output


def test_one_withdrawn_meanwhile_is_refused_alone_and_named(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Withdrawn after the person confirmed and before its vote was sent."""
    from airlock.cli import _bulk

    proposals = [_submit(served, n) for n in range(4)]
    gone = proposals[2]["id"]

    def confirm_then_the_agent_withdraws(count: int, verb: str, *, yes: bool) -> None:
        assert count == 4
        _withdraw(served, gone)

    monkeypatch.setattr(_bulk, "_confirm", confirm_then_the_agent_withdraws)
    served.login("alice")
    result = served.run("approvals", "approve", *(p["id"] for p in proposals), "--yes")
    assert result.exit_code == 1, result.output
    refused = [line for line in result.output.splitlines() if line.startswith("refused")]
    assert len(refused) == 1 and gone in refused[0] and "E_STATE" in refused[0]
    for p in proposals:
        assert served.proposal(p["id"])["state"] == ("withdrawn" if p["id"] == gone else "approved")
    assert "approve: 3 of 4 decided" in result.output


def test_one_no_longer_pending_is_left_out_and_named_before_the_confirmation(
    served: Served,
) -> None:
    proposals = [_submit(served, n) for n in range(3)]
    _withdraw(served, proposals[0]["id"])
    served.login("alice")
    result = served.run("approvals", "approve", *(p["id"] for p in proposals), "--yes", "--json")
    assert result.exit_code == 1, result.output
    outcomes = {r["id"]: r["outcome"] for r in json.loads(result.stdout)["results"]}
    assert outcomes == {
        proposals[0]["id"]: "left_out",
        proposals[1]["id"]: "approved",
        proposals[2]["id"]: "approved",
    }


def test_a_high_risk_proposal_in_the_selection_sends_nothing(served: Served) -> None:
    stop = _submit(served, 1)
    delete = _submit(served, 2, operation="delete")
    served.login("alice")
    result = served.run("approvals", "approve", stop["id"], delete["id"], "--yes")
    assert result.exit_code == 1, result.output
    assert "E_BULK_HIGH_RISK" in result.output and delete["id"] in result.output
    assert served.proposal(stop["id"])["votes"] == []
    assert served.proposal(delete["id"])["votes"] == []


def test_several_without_yes_and_without_a_terminal_send_nothing(served: Served) -> None:
    proposals = [_submit(served, n) for n in range(2)]
    served.login("alice")
    result = served.run("approvals", "approve", *(p["id"] for p in proposals))
    assert result.exit_code == 2, result.output
    assert all(served.proposal(p["id"])["state"] == "pending" for p in proposals)


def test_confirm_with_several_ids_is_a_usage_error(served: Served) -> None:
    proposals = [_submit(served, n) for n in range(2)]
    served.login("alice")
    result = served.run(
        "approvals", "approve", *(p["id"] for p in proposals), "--confirm", "i-t4n0bulk0000"
    )
    assert result.exit_code == 2, result.output


def test_several_ids_are_rejected_with_one_reason(served: Served) -> None:
    proposals = [_submit(served, n) for n in range(3)]
    served.login("bob")
    result = served.run(
        "approvals", "reject", *(p["id"] for p in proposals), "--reason", "not_idle", "--yes"
    )
    assert result.exit_code == 0, result.output
    for p in proposals:
        record = served.proposal(p["id"])
        assert record["state"] == "rejected"
        assert record["rejection"]["reason_code"] == "not_idle"


def test_list_shows_each_signed_saving_and_the_pending_total(served: Served) -> None:
    prices = (113000, 186000, 24000)
    for n, micros in enumerate(prices):
        _submit(served, n, hourly_micros=micros)
    _submit(served, 9)  # no estimate
    served.login("alice")
    result = served.run("approvals", "list")
    assert result.exit_code == 0, result.output
    assert "SAVES/MONTH" in result.stdout
    for micros in prices:
        cents = monthly_minor(micros, "USD")
        assert f"USD {cents // 100}.{cents % 100:02d}" in result.stdout
    total = sum(monthly_minor(m, "USD") for m in prices)
    assert (
        f"pending on this page: 4 proposals, est. USD {total // 100}.{total % 100:02d} a month "
        "saved (1 without an estimate)"
    ) in result.stdout


def test_list_totals_an_rds_stops_signed_saving(served: Served) -> None:
    _submit(served, 1, hourly_micros=113000)
    record = _submit(
        served, 2, hourly_micros=250000, resource_type="rds.instance", resource_id="rm-t4n0bulk0002"
    )
    assert json.loads(record["action_jcs"])["evidence"]["saving"]["monthly_minor"] == 18250
    served.login("alice")
    result = served.run("approvals", "list")
    assert result.exit_code == 0, result.output
    assert "USD 182.50" in result.stdout
    total = monthly_minor(113000, "USD") + 18250
    assert (
        f"pending on this page: 2 proposals, est. USD {total // 100}.{total % 100:02d} a month"
    ) in result.stdout


def test_show_prints_the_signed_saving_and_its_price(served: Served) -> None:
    record = _submit(served, 1, hourly_micros=113000)
    served.login("alice")
    result = served.run("approvals", "show", record["id"])
    assert result.exit_code == 0, result.output
    assert (
        "saves      USD 82.49 a month (est.: its compute price stops; price USD 0.113000 an "
        "hour from ecs:DescribePrice, 730 h a month)"
    ) in result.stdout
