"""airlock approvals edit, against a real checkpoint over HTTP: --set values parsed as JSON
when they parse, the new proposal and what changed printed, the editor's vote counted;
show prints where an edited call came from and went; refused edits send nothing."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from airlock.cli._approvals_edit import parse_set
from tests.checkpoint.tools import submit_tool

from .conftest import Served

PID = "prop_tool0000001"


def _submit(served: Served, **kwargs: Any) -> dict[str, Any]:
    response = submit_tool(served.world, **kwargs)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_set_values_are_json_when_they_parse_else_text() -> None:
    assert parse_set(["amount=15", "memo=15 EUR", 'q="15"', "ok=true", "n=null", "l=[1,2]"]) == {
        "amount": 15,
        "memo": "15 EUR",
        "q": "15",
        "ok": True,
        "n": None,
        "l": [1, 2],
    }
    assert parse_set(["memo=a=b", "x=NaN"]) == {"memo": "a=b", "x": "NaN"}


@pytest.mark.parametrize("pairs", [["amount"], ["=1"], ["a=1", "a=2"], ["a=1.5"], ["a=[1e3]"]])
def test_malformed_set_is_a_usage_error(pairs: list[str]) -> None:
    with pytest.raises(typer.Exit) as info:
        parse_set(pairs)
    assert info.value.exit_code == 2


def test_edit_prints_the_new_proposal_and_show_links_both(served: Served) -> None:
    old = _submit(served)
    served.login("alice")
    result = served.run(
        "approvals", "edit", PID, "--set", "amount=1500", "--note", "shipping only", "--yes"
    )
    assert result.exit_code == 0, result.output
    new_id = served.proposal(PID)["superseded_by"]
    assert new_id and new_id != PID
    assert f"edited {PID} into {new_id} (the old one is withdrawn)" in result.stdout
    assert "amount: 12500 -> 1500" in result.stdout
    assert f"approved {new_id}: quorum reached (1 of 1)" in result.stdout
    new = served.proposal(new_id)
    assert new["action"]["arguments"]["amount"] == 1500
    assert new["action_hash"] != old["action_hash"]
    assert f"you approved action hash {new['action_hash']}" in result.stdout
    assert [v["voter"] for v in new["votes"]] == ["alice"]
    shown_old = served.run("approvals", "show", PID)
    assert shown_old.exit_code == 0, shown_old.output
    assert f"superseded by {new_id}" in shown_old.stdout
    shown_new = served.run("approvals", "show", new_id)
    assert "edited     by alice at " in shown_new.stdout
    assert f"from {PID}: shipping only" in shown_new.stdout
    assert "  changed  amount: 12500 -> 1500" in shown_new.stdout


def test_refused_edits_name_the_code_and_change_nothing(served: Served) -> None:
    _submit(served)
    served.login("alice")
    for args, code in (
        (["--set", 'amount="1500"'], "E_INVALID"),  # a string for an integer
        (["--set", "refund_all=true"], "E_INVALID"),  # no such argument
    ):
        result = served.run("approvals", "edit", PID, *args, "--yes")
        assert result.exit_code == 1, result.output
        assert code in result.stderr
    record = served.proposal(PID)
    assert (record["state"], record["superseded_by"], record["votes"]) == ("pending", None, [])
    script = served.run("approvals", "edit", PID, "--set", "amount=1500")
    assert script.exit_code == 2 and "--yes" in script.stderr  # no terminal: never waits
    cloud = served.submit()
    refused = served.run("approvals", "edit", cloud["id"], "--set", "x=1", "--yes")
    assert refused.exit_code == 1 and "E_STATE" in refused.stderr


def test_edit_help_says_what_it_does() -> None:
    from .conftest import airlock

    result = airlock("approvals", "edit", "--help")
    assert result.exit_code == 0
    for part in ("--set", "NAME=VALUE", "--confirm", "--note", "superseded"):
        assert part in result.stdout, part
