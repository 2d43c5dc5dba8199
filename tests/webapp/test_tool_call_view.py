"""The web app shows a tool call plainly, with no browser: the tool, its arguments and
premises as tables (every value, escaped), the target, the summary, the audience, the
effect key, the canonical bytes and the hash; high risk asks for the typed target; a
record that disagrees with its signed text is not offered for approval."""

from __future__ import annotations

import copy
from typing import Any

from airlock.protocol import ToolCall, action_hash, canonical_bytes
from tests.checkpoint.builders import tool_call_value

from .conftest import Site

PID = "prop_tool0000001"


def add_tool_call(site: Site, *, risk: str = "medium", **kwargs: Any) -> dict[str, Any]:
    """A pending tool call as the checkpoint records it (gate contract §2)."""
    value = tool_call_value(proposal_id=PID, risk=risk, **kwargs)
    call = ToolCall.model_validate(value)
    jcs = call.canonical_bytes()
    record = site.fake.add(
        {
            "proposal_id": PID,
            "provider": "",
            "account": call.audience,
            "region": "",
            "resource": {"type": "tool-call", "id": call.target},
            "operation": call.tool,
            "proposed_by": call.proposed_by,
        }
    )
    high = risk == "high"
    record.update(
        action_hash=action_hash(jcs),
        action_jcs=jcs.decode(),
        action=copy.deepcopy(value),
        risk=risk,
        action_type="airlock.tool-call/v1",
        tool=call.tool,
        target=call.target,
        effect_key=call.effect_key,
        audience=call.audience,
        summary=call.summary,
    )
    record["policy"].update(rule="default-one-human", quorum=1, confirm=high)
    record["votes_needed"] = 1
    return record


def test_tool_call_page_shows_every_part(site: Site) -> None:
    site.sign_in()
    record = add_tool_call(site)
    html = site.client.get(f"/proposals/{PID}").text
    assert 'id="signed-mismatch"' not in html and 'id="approve-form"' in html
    for part in (
        "<code>refund</code>",
        "<code>order-881</code>",
        "<code>refund:order-881</code>",
        "<code>airlock-gate/payments</code>",
        "Refund 125.00 EUR on order-881",
        "<td><code>amount</code></td><td><code>12500</code></td>",
        "<td><code>currency</code></td><td><code>&#34;EUR&#34;</code></td>",
        "<td><code>refunded_total</code></td><td><code>0</code></td>",
        "<td><code>order_status</code></td><td><code>&#34;paid&#34;</code></td>",
        record["action_hash"],
    ):
        assert part in html, part
    assert 'id="hash-check">matches the text below' in html
    assert "The tool call exactly as signed" in html


def test_arguments_table_is_escaped(site: Site) -> None:
    site.sign_in()
    add_tool_call(
        site,
        arguments={
            "<b>name</b>": "<script>alert(1)</script>",
            "note": "dorp\u202eprod",
            "nested": {"a": [1, "<i>"]},
        },
    )
    html = site.client.get(f"/proposals/{PID}").text
    table = html[html.index('id="arguments"') : html.index('id="premises"')]
    assert "<script>" not in table and "<b>" not in table and "<i>" not in table
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in table
    assert "&lt;b&gt;name&lt;/b&gt;" in table
    assert "\u202e" not in html  # the bidi override is shown, never applied
    assert "dorp\\u202eprod" in table
    assert "{&#34;a&#34;:[1,&#34;&lt;i&gt;&#34;]}" in table  # every value, in full


def test_high_risk_tool_call_asks_for_the_typed_target(site: Site) -> None:
    site.sign_in()
    add_tool_call(site, risk="high")
    html = site.client.get(f"/proposals/{PID}").text
    assert "Type the target <code>order-881</code> to confirm" in html
    assert 'data-expect="order-881"' in html


def test_swapped_target_of_a_tool_call_is_not_offered_for_approval(site: Site) -> None:
    site.sign_in()
    record = add_tool_call(site)
    record["target"] = record["resource_id"] = "order-999"
    html = site.client.get(f"/proposals/{PID}").text
    assert 'id="approve-form"' not in html and 'id="signed-mismatch"' in html


def test_swapped_argument_of_a_tool_call_is_not_offered_for_approval(site: Site) -> None:
    site.sign_in()
    record = add_tool_call(site)
    record["action"]["arguments"]["amount"] = 1
    html = site.client.get(f"/proposals/{PID}").text
    assert 'id="approve-form"' not in html and 'id="signed-mismatch"' in html
    assert canonical_bytes(record["action"]) != record["action_jcs"].encode()


def test_queue_shows_a_tool_call_with_its_summary_and_gate(site: Site) -> None:
    site.sign_in()
    add_tool_call(site)
    html = site.client.get("/").text
    assert "Refund 125.00 EUR on order-881" in html
    assert "gate airlock-gate/payments" in html
    assert f'value="{PID}"' not in html  # never in a bulk decision


def test_tool_calls_own_reject_reason_is_sent(site: Site) -> None:
    site.sign_in()
    add_tool_call(site)
    html = site.client.get(f"/proposals/{PID}").text
    assert 'id="tool_reason"' in html
    response = site.client.post(
        f"/proposals/{PID}/reject",
        data={
            "csrf_token": site.csrf(f"/proposals/{PID}"),
            "reason_code": "other",
            "tool_reason": "fraud_suspected",
            "note": "chargebacks",
        },
    )
    assert response.status_code in (200, 303), response.text
    assert site.fake.proposals[PID]["rejection"]["reason_code"] == "fraud_suspected"


def test_cloud_action_page_has_no_tool_reason_field(site: Site) -> None:
    from .fakes import action_value

    site.sign_in()
    site.fake.add(action_value())
    assert 'id="tool_reason"' not in site.client.get("/proposals/prop_fake000001").text


def test_a_tool_call_run_by_its_gate_shows_the_gates_receipt(site: Site) -> None:
    site.sign_in()
    record = add_tool_call(site)
    site.fake.executed(PID, verified=False, detail="refund returned")
    html = site.client.get(f"/proposals/{PID}").text
    assert "signature valid" in html
    assert "refund returned" in html
    assert record["audience"] in html
