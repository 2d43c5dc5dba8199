"""A batch of priced stop proposals on a running stack, and the proof of what became of it.

Used by the bulk-review tests of the CLI and of the web app: ``submit_batch`` creates one
idle instance in devcloud per proposal and submits a stop for each, as the agent would,
with a signed saving; ``assert_each_executed_once`` is the judge afterwards: each approved
proposal has one vote, one signed approval bound to its own hash, one execution, and
devcloud's write log holds exactly one write for it (none for the ones left out).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from airlock.protocol import monthly_minor
from devstack.stack import Stack
from tests.checkpoint.builders import action_value

__all__ = ["PRICES", "assert_each_executed_once", "signed_savings_minor", "submit_batch"]

#: Hourly prices in millionths of a USD, cycled over the batch (devcloud's ECS types).
PRICES = (113000, 186000, 24000, 438000)


def submit_batch(stack: Stack, tag: str, count: int) -> list[dict[str, Any]]:
    """``count`` pending stop proposals, each on its own running instance, each priced."""
    records = []
    for n in range(count):
        rid = f"i-t4n0{tag}{n:04d}"
        stack.devcloud.admin.create_instance(rid, status="Running", name=f"batch-{tag}-{n}")
        value = action_value(proposal_id=f"prop_{tag}{n:08d}", resource_id=rid)
        micros = PRICES[n % len(PRICES)]
        value["evidence"]["saving"] = {
            "currency": "USD",
            "monthly_minor": monthly_minor(micros, "USD"),
            "hourly_price_micros": micros,
            "hours_per_month": 730,
            "basis": "compute",
            "source": "ecs:DescribePrice",
        }
        records.append(stack.submit(value))
    return records


def signed_savings_minor(records: Sequence[dict[str, Any]]) -> int:
    """The sum of the savings as signed in each record's action text."""
    return sum(json.loads(r["action_jcs"])["evidence"]["saving"]["monthly_minor"] for r in records)


def assert_each_executed_once(
    stack: Stack, approved: Sequence[dict[str, Any]], left_out: Sequence[dict[str, Any]]
) -> None:
    approval_ids = set()
    for proposal in approved:
        record = stack.wait_state(proposal["id"], {"executed"})
        assert len(record["votes"]) == 1, record["votes"]
        statement = json.loads(base64.b64decode(record["approval"]["envelope"]["payload"]))
        assert statement["action_hash"] == proposal["action_hash"] == record["action_hash"]
        assert statement["proposal_id"] == proposal["id"]
        approval_ids.add(record["approval"]["approval_id"])
        assert record["outcome"]["outcome"] == "succeeded"
        assert record["outcome"]["receipt_verified"]
        writes = stack.devcloud.admin.writes(resource_id=proposal["resource_id"])
        assert [w["action"] for w in writes] == ["StopInstance"], writes
    assert len(approval_ids) == len(approved)  # twenty signed approvals, not one shared
    for proposal in left_out:
        record = stack.agent_view(proposal["id"])
        assert record["votes"] == [] and record["approval"] is None, record
        assert stack.devcloud.admin.writes(resource_id=proposal["resource_id"]) == []
