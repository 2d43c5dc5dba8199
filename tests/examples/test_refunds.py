"""examples/refunds, run as its README says: ``airlock up``, the setup script, the agent.

Real processes on loopback: the whole stack (``airlock up``), the agent as a process that
waits for people, a person approving over the checkpoint's API, a refund issued by hand
meanwhile. The judge of "exactly once" is the payments database, not the gate.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from typing import Any

import httpx
import pytest

from tests.support.polling import wait_for

from .support import DEADLINE as _DEADLINE
from .support import Stack, clean_env, finish

pytestmark = pytest.mark.slow

_GATE_ENV = "refunds-gate.env"


def _agent(stack: Stack, *args: str) -> subprocess.Popen[str]:
    return stack.python("examples.refunds.agent", *args, env=stack.env(_GATE_ENV))


def _pending_refund(person: httpx.Client, target: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        page = person.get("/v1/proposals", params={"state": "pending"}).json()
        for item in page["items"]:
            if item.get("tool") == "refund" and item.get("target") == target:
                return dict(item)
        return None

    return wait_for(f"the refund on {target} to be proposed", found, _DEADLINE, every=0.2)


def _approve(person: httpx.Client, proposal: dict[str, Any], target: str) -> None:
    answer = person.post(
        f"/v1/proposals/{proposal['id']}/approve",
        json={"action_hash": proposal["action_hash"], "confirm": target},
    )
    assert answer.status_code == 200, answer.text


def _refunds(stack: Stack) -> list[str]:
    done = stack.python("examples.refunds.payments", "list")
    code, out = finish(done)
    assert code == 0, out
    return out.splitlines()


def test_the_refunds_example_runs_once_and_refuses_a_moved_premise(stack: Stack) -> None:
    setup = stack.python("examples.refunds.setup", "--home", str(stack.home), env=clean_env())
    code, out = finish(setup)
    assert code == 0, out
    with contextlib.closing(stack.person("alice")) as alice:
        _walk_through(stack, alice)


def _walk_through(stack: Stack, alice: httpx.Client) -> None:

    # Approved in the checkpoint (as in the web app), run once.
    agent = _agent(stack, "order-881", "2500", "--wait", "100")
    proposal = _pending_refund(alice, "order-881")
    assert proposal["effect_key"] == "refund:order-881"
    assert json.loads(proposal["action_jcs"])["premises"] == {"refunded": 0}
    _approve(alice, proposal, "order-881")
    code, out = finish(agent)
    assert code == 0, out
    assert "refunded 2500 on order-881" in out
    (refund,) = _refunds(stack)
    assert "order-881" in refund and "refund:order-881" in refund
    executed = wait_for(
        "the gate's receipt to reach the checkpoint",
        lambda: (
            (r := alice.get(f"/v1/proposals/{proposal['id']}").json())["state"] == "executed" and r
        ),
        _DEADLINE,
    )
    assert executed["outcome"]["outcome"] == "succeeded"
    assert executed["outcome"]["receipt_verified"] is True
    receipt = stack.root / "receipt.json"
    receipt.write_text(json.dumps(executed["outcome"]["receipt"]))
    public = stack.root / "gate-public.json"
    keyset = json.loads((stack.home / "gate-keys.json").read_text())["refunds"]
    public.write_text(json.dumps(keyset))
    verify = stack.python("airlock.cli", "receipts", "verify", str(receipt), "--keys", str(public))
    code, out = finish(verify)
    assert code == 0, out
    assert out.startswith("OK: succeeded")

    # Called again: the same proposal, used already.
    again = _agent(stack, "order-881", "2500", "--wait", "5")
    code, out = finish(again)
    assert code == 4, out
    assert "E_REPLAY" in out
    assert len(_refunds(stack)) == 1

    # A refund by hand while the agent waits: the premise moved, nothing is called.
    waiting = _agent(stack, "order-882", "1000", "--wait", "100")
    proposal = _pending_refund(alice, "order-882")
    by_hand = stack.python("examples.refunds.payments", "refund", "order-882", "500")
    code, out = finish(by_hand)
    assert code == 0, out
    _approve(alice, proposal, "order-882")
    code, out = finish(waiting)
    assert code == 4, out
    assert "E_PREMISES" in out
    assert "refunded: was 0, now 500" in out
    rows = _refunds(stack)
    assert len(rows) == 2
    assert [row for row in rows if "order-882" in row and "by-hand" in row]
