"""In a real terminal (a pty): a high-risk approve asks for the typed resource id, and a
wrong one is refused before anything is sent."""

from __future__ import annotations

from .conftest import Served, in_terminal


def test_typed_resource_id_approves_a_delete_in_a_terminal(served: Served) -> None:
    record = served.submit(
        proposal_id="prop_typed000001", resource_id="i-t4n0typed01", operation="delete"
    )
    served.login("alice")
    code, output = in_terminal(served.home, ["approvals", "approve", record["id"]], "i-t4n0typed01")
    assert code == 0, output
    assert "Type the resource id to confirm" in output
    assert [v["voter"] for v in served.proposal(record["id"])["votes"]] == ["alice"]


def test_mistyped_resource_id_is_refused_before_sending(served: Served) -> None:
    record = served.submit(
        proposal_id="prop_typed000002", resource_id="i-t4n0typed02", operation="delete"
    )
    served.login("alice")
    code, output = in_terminal(served.home, ["approvals", "approve", record["id"]], "i-t4n0typed0")
    assert code == 1, output
    assert "refused locally, nothing sent: E_CONFIRM_MISMATCH" in output
    assert served.proposal(record["id"])["votes"] == []


def test_answering_no_sends_nothing(served: Served) -> None:
    record = served.submit(proposal_id="prop_typed000003")
    served.login("alice")
    code, output = in_terminal(served.home, ["approvals", "approve", record["id"]], "n")
    assert code == 1, output
    assert "nothing was sent" in output
    assert served.proposal(record["id"])["votes"] == []
