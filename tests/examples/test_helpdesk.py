"""examples/helpdesk, run as its README says: ``airlock up``, then the one command.

Real processes on loopback: the whole stack, the demo (the tool loop, ``airlock mcp
proxy`` and the FastMCP server it starts), and people deciding over the checkpoint's API
as the web app does. The judge of "exactly once" is the desk's own count of the calls
its ``refund`` tool received, not the proxy or the loop.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
from typing import Any

import httpx
import pytest

from examples.helpdesk import desk
from tests.support.polling import wait_for

from .support import DEADLINE, Stack

pytestmark = pytest.mark.slow

_PAGE = re.compile(r"approve \(or edit the amount, then approve\): (\S+)/proposals/(prop_\w+)")


class _Demo:
    """``python -m examples.helpdesk.demo TASK`` as a person runs it, read as it prints."""

    def __init__(self, stack: Stack, *args: str) -> None:
        self.proc = stack.python("examples.helpdesk.demo", *args)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        self.lines.extend(line.rstrip("\n") for line in self.proc.stdout)

    def proposal_page(self) -> tuple[str, str]:
        """The web app address and the proposal id the demo says to decide at."""

        def said() -> tuple[str, str] | None:
            found = [m for line in self.lines if (m := _PAGE.search(line))]
            if not found and self.proc.poll() is not None:
                raise AssertionError("\n".join(self.lines))
            return (found[0].group(1), found[0].group(2)) if found else None

        return wait_for("the demo to name the proposal", said, DEADLINE, every=0.1)

    def finish(self) -> tuple[int, str]:
        code = self.proc.wait(timeout=DEADLINE)
        self._reader.join(timeout=DEADLINE)
        return code, "\n".join(self.lines)

    def __enter__(self) -> _Demo:
        return self

    def __exit__(self, *exc: object) -> None:
        # A failed step leaves no demo waiting its 600 s (its proxy and server stop when
        # their stdin closes).
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE)
        self._reader.join(timeout=DEADLINE)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def _pending(person: httpx.Client, proposal_id: str) -> dict[str, Any]:
    answer = person.get(f"/v1/proposals/{proposal_id}")
    assert answer.status_code == 200, answer.text
    proposal: dict[str, Any] = answer.json()
    assert proposal["state"] == "pending"
    return proposal


def _calls(stack: Stack, order: str) -> list[dict[str, Any]]:
    """The calls of the desk's refund tool on ``order``, as the desk counted them."""
    with contextlib.closing(desk.connect(stack.home / "helpdesk.db")) as conn:
        return [c for c in desk.refund_calls(conn) if c["order"] == order]


def test_the_demo_waits_for_a_person_and_the_approved_refund_runs_once(stack: Stack) -> None:
    webapp = json.loads((stack.home / "up.json").read_text())["webapp_url"]
    with (
        contextlib.closing(stack.person("alice")) as alice,
        _Demo(stack, "refund order 881 for 25.00") as demo,
    ):
        shown, proposal_id = demo.proposal_page()
        assert shown == webapp
        # The call arrived at the checkpoint as the loop made it, and nothing ran yet.
        proposal = _pending(alice, proposal_id)
        action = json.loads(proposal["action_jcs"])
        assert (action["tool"], action["arguments"], action["premises"]) == (
            "refund",
            {"order": "order-881", "amount": 2500},
            {"refunded": 0},
        )
        assert _calls(stack, "order-881") == []

        answer = alice.post(
            f"/v1/proposals/{proposal_id}/approve", json={"action_hash": proposal["action_hash"]}
        )
        assert answer.status_code == 200, answer.text
        code, out = demo.finish()
    assert code == 0, out
    assert "model: Refunded 25.00 on order-881 (rf_" in out
    assert "25.00 of 40.00 refunded so far." in out
    assert "the refund tool was called 1 time(s)" in out
    assert _calls(stack, "order-881") == [{"order": "order-881", "amount": 2500}]


def test_after_ctrl_c_a_new_process_goes_on_and_the_model_reads_the_rejection(
    stack: Stack,
) -> None:
    with (
        contextlib.closing(stack.person("bob")) as bob,
        _Demo(stack, "refund order 882 for 10.00") as demo,
    ):
        _, proposal_id = demo.proposal_page()
        demo.proc.send_signal(signal.SIGINT)
        code, out = demo.finish()
        assert code == 130, out
        resume = re.search(r"--resume (run_\w+)", out)
        assert resume is not None, out
        _pending(bob, proposal_id)
        answer = bob.post(
            f"/v1/proposals/{proposal_id}/reject",
            json={"reason_code": "needs_more_info", "note": "which items came back?"},
        )
        assert answer.status_code == 200, answer.text
    with _Demo(stack, "--resume", resume.group(1)) as demo:
        code, out = demo.finish()
    assert code == 0, out
    assert (
        "model: The refund on order-882 did not happen: E_REJECTED: refund was rejected "
        "by bob: needs_more_info which items came back?"
    ) in out
    assert "order-882  Grace Hopper   paid  125.00  refunded    0.00" in out
    assert _calls(stack, "order-882") == []


def test_a_persons_edit_reaches_the_desk_and_the_model_reads_it(stack: Stack) -> None:
    with (
        contextlib.closing(stack.person("alice")) as alice,
        _Demo(stack, "refund order 883 for 19.99") as demo,
    ):
        _, proposal_id = demo.proposal_page()
        proposal = _pending(alice, proposal_id)
        answer = alice.post(
            f"/v1/proposals/{proposal_id}/edit",
            json={"action_hash": proposal["action_hash"], "set": {"amount": 1500}},
        )
        assert answer.status_code == 200, answer.text
        edited = answer.json()
        assert edited["edit"]["changes"] == [{"argument": "amount", "was": 1999, "now": 1500}]
        # One approver suffices for this tool: the editor's vote approved the edit.
        assert edited["state"] == "approved", edited
        code, out = demo.finish()
    assert code == 0, out
    assert "The approver changed the amount from 19.99." in out
    assert _calls(stack, "order-883") == [{"order": "order-883", "amount": 1500}]
