"""airlock approvals with a tool call, against a real checkpoint over HTTP: show prints
the tool, target, summary, audience, effect key, arguments and premises (every value,
escaped), the canonical text and the hash; a high-risk approve needs the typed target; a
tool's own reject reason goes through; a tool call is never decided in bulk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airlock.api import Proposal
from airlock.cli._client import CheckpointUnavailable
from airlock.cli._proposal import signed_action
from services.checkpoint.policy import Policy
from tests.checkpoint.harness import make_world
from tests.checkpoint.tools import submit_tool

from .conftest import Served, in_terminal, serving

PID = "prop_tool0000001"


def _submit(served: Served, **kwargs: Any) -> dict[str, Any]:
    response = submit_tool(served.world, **kwargs)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_show_prints_a_tool_call_plainly(served: Served) -> None:
    record = _submit(
        served,
        arguments={"order": "order-881", "amount": 12500, "memo": "dorp\u202eprod", "x": [1]},
    )
    served.login("alice")
    result = served.run("approvals", "show", PID)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for part in (
        "summary    Refund 125.00 EUR on order-881",
        "target     order-881",
        "effect key refund:order-881",
        "audience   airlock-gate/payments",
        "calls refund on order-881",
        'order   "order-881"',
        "amount  12500",
        'memo    "dorp\\u202eprod"',
        "x       [1]",
        "refunded_total  0",
        'order_status    "paid"',
        "canonical tool call (RFC 8785)",
        f"hash       {record['action_hash']}",
    ):
        assert part in out, part
    assert "\u202e" not in result.output


def test_high_risk_tool_call_approve_needs_the_target(served: Served) -> None:
    _submit(served, risk="high")
    served.login("alice")
    script = served.run("approvals", "approve", PID, "--yes")
    assert script.exit_code == 2 and "--confirm TARGET" in script.stderr
    wrong = served.run("approvals", "approve", PID, "--confirm", "order-882")
    assert wrong.exit_code == 1 and "E_CONFIRM_MISMATCH" in wrong.stderr
    assert served.proposal(PID)["votes"] == []
    right = served.run("approvals", "approve", PID, "--confirm", "order-881")
    assert right.exit_code == 0, right.output
    assert served.proposal(PID)["state"] == "approved"


def test_high_risk_tool_call_asks_for_the_target_in_a_terminal(served: Served) -> None:
    _submit(served, risk="high")
    served.login("alice")
    code, output = in_terminal(served.home, ["approvals", "approve", PID], "order-88")
    assert code == 1, output
    assert "Type the target to confirm" in output
    assert "refused locally, nothing sent: E_CONFIRM_MISMATCH" in output
    code, output = in_terminal(served.home, ["approvals", "approve", PID], "order-881")
    assert code == 0, output
    assert served.proposal(PID)["state"] == "approved"


def test_list_shows_tool_calls(served: Served) -> None:
    _submit(served)
    served.login("alice")
    table = served.run("approvals", "list")
    assert table.exit_code == 0, table.output
    assert PID in table.stdout and "refund" in table.stdout and "order-881" in table.stdout


def test_tool_call_is_never_decided_in_bulk(served: Served) -> None:
    _submit(served)
    cloud = served.submit()
    served.login("alice")
    result = served.run("approvals", "approve", PID, cloud["id"], "--yes")
    assert result.exit_code == 1, result.output
    assert "E_BULK_TOOL_CALL" in result.stderr
    assert served.proposal(PID)["votes"] == []


@pytest.fixture
def reasons_served(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.chdir(tmp_path)
    policy = Policy.from_bytes(
        b'version = 1\n[tools.refund]\nreject_reasons = ["fraud_suspected"]\n', "<test>"
    )
    world = make_world(sqlite_url, tmp_path, policy)
    try:
        with serving(world.app) as (_server, port, _thread):
            yield Served(world, f"http://127.0.0.1:{port}", tmp_path / "home")
    finally:
        world.client.close()
        world.checkpoint.db.dispose()


def test_reject_with_the_tools_own_reason(reasons_served: Served) -> None:
    served = reasons_served
    _submit(served)
    served.login("bob")
    bad = served.run("approvals", "reject", PID, "--reason", "Fraud Suspected")
    assert bad.exit_code == 2
    result = served.run("approvals", "reject", PID, "--reason", "fraud_suspected", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rejection"]["reason_code"] == "fraud_suspected"


def test_tool_call_record_that_disagrees_with_its_text_is_not_trusted(served: Served) -> None:
    record = _submit(served)
    record["target"] = record["resource_id"] = "order-999"
    with pytest.raises(CheckpointUnavailable):
        signed_action(Proposal.model_validate(record))
