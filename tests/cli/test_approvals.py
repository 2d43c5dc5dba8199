"""airlock approvals: what a person approves is what they were shown, byte for byte.

Against a real checkpoint over HTTP: the hash the CLI displays is the hash it sends; a
high-risk approve needs the typed resource id (refused locally without a terminal, and by
the checkpoint when wrong); reject carries a reason code; --json output parses.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from airlock.api import Proposal as _Proposal
from airlock.cli._client import CheckpointUnavailable
from airlock.cli._proposal import signed_action as _signed_action
from airlock.cli._text import inert
from tests.checkpoint.harness import START, signed_receipt
from tests.executor.support import receipt_keyset

from .conftest import Served

DELETE_TARGET = "i-t4n0delete1"


def _statement(record: dict[str, Any]) -> dict[str, Any]:
    envelope = record["approval"]["envelope"]
    value: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return value


def _hash_line(output: str) -> str:
    return next(line.split()[1] for line in output.splitlines() if line.startswith("hash "))


def test_list_shows_a_table_and_json_parses(served: Served) -> None:
    stop = served.submit(proposal_id="prop_list0000001", resource_id="i-t4n0list0001")
    served.submit(proposal_id="prop_list0000002", resource_id="i-t4n0list0002", operation="delete")
    served.login("alice")
    table = served.run("approvals", "list")
    assert table.exit_code == 0, table.output
    assert "prop_list0000001" in table.stdout
    assert "0 of 2" in table.stdout  # the delete's quorum
    page = json.loads(served.run("approvals", "list", "--json").stdout)
    assert [p["id"] for p in page["items"]] == ["prop_list0000002", "prop_list0000001"]
    only = json.loads(served.run("approvals", "list", "--operation", "stop", "--json").stdout)
    assert [p["id"] for p in only["items"]] == [stop["id"]]
    empty = served.run("approvals", "list", "--state", "executed")
    assert empty.exit_code == 0
    assert "no proposals match" in empty.stdout


def _three_states(served: Served) -> dict[str, str]:
    """A pending, a rejected and an approved proposal, newest last: their ids by state."""
    ids = {}
    for n, state in enumerate(("rejected", "approved", "pending"), start=1):
        record = served.submit(proposal_id=f"prop_states00{n:03d}", resource_id=f"i-t4n0state{n}")
        ids[state] = record["id"]
    rejected = served.world.client.post(
        f"/v1/proposals/{ids['rejected']}/reject",
        json={"reason_code": "not_idle", "note": ""},
        headers=served.world.auth("bob"),
    )
    assert rejected.status_code == 200, rejected.text
    approved = served.proposal(ids["approved"])
    assert (
        served.world.approve("alice", ids["approved"], approved["action_hash"]).status_code == 200
    )
    return ids


def test_list_takes_several_states_and_its_next_page_keeps_them(served: Served) -> None:
    ids = _three_states(served)
    served.login("alice")
    args = ("approvals", "list", "--state", "rejected", "--state", "pending")
    both = json.loads(served.run(*args, "--json").stdout)
    assert [p["id"] for p in both["items"]] == [ids["pending"], ids["rejected"]]
    assert both["states"] == ["pending", "rejected"]
    first = served.run(*args, "--limit", "1")
    assert first.exit_code == 0, first.output
    assert ids["pending"] in first.stdout and ids["approved"] not in first.stdout
    # The hint is the next page of this list, filters and page size and all, as a
    # command to paste.
    hint = next(line for line in first.output.splitlines() if line.startswith("more: "))
    assert hint == (
        "more: airlock approvals list --state pending --state rejected --limit 1 "
        f"--before {ids['pending']}"
    )
    second = served.run(*hint.removeprefix("more: airlock ").split())
    assert second.exit_code == 0, second.output
    assert ids["rejected"] in second.stdout
    assert ids["approved"] not in second.stdout and ids["pending"] not in second.stdout


def test_several_states_from_a_checkpoint_that_kept_only_one_are_refused_not_shown(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older checkpoint keeps only the last ``state`` given and echoes none: its list
    would look complete with every proposal in the other states missing."""
    ids = _three_states(served)
    real = served.world.checkpoint.list

    def older_checkpoint_list(principal: Any, *, state: Any = None, **kwargs: Any) -> Any:
        kept = state[-1] if isinstance(state, list | tuple) else state
        return real(principal, state=kept, **kwargs).model_copy(update={"states": None})

    monkeypatch.setattr(served.world.checkpoint, "list", older_checkpoint_list)
    served.login("alice")
    for extra in ((), ("--json",)):
        result = served.run(
            "approvals", "list", "--state", "rejected", "--state", "pending", *extra
        )
        assert result.exit_code != 0, result.output
        assert "did not filter on every --state" in result.output
        assert ids["pending"] not in result.stdout and ids["rejected"] not in result.stdout
    one = served.run("approvals", "list", "--state", "rejected")  # one state: every one can
    assert one.exit_code == 0 and ids["rejected"] in one.stdout, one.output


def test_show_prints_the_canonical_action_and_hash_exactly_as_signed(served: Served) -> None:
    record = served.submit(proposal_id="prop_show0000001")
    served.login("alice")
    result = served.run("approvals", "show", record["id"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert record["action_jcs"] in lines  # the RFC 8785 text on a line of its own
    assert _hash_line(result.stdout) == record["action_hash"]
    assert "votes      0 of 1" in result.stdout
    assert "rule stop-one-person" in result.stdout
    assert "CPU p95 3.40 %" in result.stdout
    assert "STOP the ECS instance i-t4n0example in Alibaba Cloud ap-southeast-1" in result.stdout
    shown = json.loads(served.run("approvals", "show", record["id"], "--json").stdout)
    assert shown["action_hash"] == record["action_hash"]


def test_show_counts_only_the_votes_the_checkpoint_counts(served: Served) -> None:
    record = served.submit(
        proposal_id="prop_count000001", resource_id=DELETE_TARGET, operation="delete"
    )
    voted = served.world.approve(
        "alice", record["id"], record["action_hash"], confirm=DELETE_TARGET
    )
    assert voted.status_code == 200, voted.text
    served.world.accounts.disable_user("alice")
    served.login("bob")
    result = served.run("approvals", "show", record["id"])
    assert result.exit_code == 0, result.output
    assert "votes      0 of 2" in result.stdout
    assert "(does not count)" in result.stdout


def test_show_prints_an_executor_refusal_before_use_inert(served: Served) -> None:
    record = served.submit(proposal_id="prop_refused0001")
    approved = served.world.approve("alice", record["id"], record["action_hash"]).json()
    approval_id = approved["approval"]["approval_id"]
    receipt = signed_receipt(
        approval_id,
        None,
        "refused",
        executor="airlock-executor/staging",
        refusal_code="E_AUDIENCE",
        detail="approval is for another executor\x1b[2J",
        at=START + 5,
    )
    posted = served.world.client.post(
        "/v1/refusals", json={"receipt": receipt}, headers=served.world.auth("executor")
    )
    assert posted.status_code == 200, posted.text
    served.login("bob")
    result = served.run("approvals", "show", record["id"])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("refused "))
    assert "before use by executor airlock-executor/staging" in line
    assert "E_AUDIENCE: approval is for another executor\\u001b[2J" in line
    assert "\x1b" not in result.stdout  # the escape sequence never reaches the terminal
    assert f"proposal   {record['id']}  (approved)" in result.stdout
    shown = json.loads(served.run("approvals", "show", record["id"], "--json").stdout)
    assert [r["refusal_code"] for r in shown["executor_refusals"]] == ["E_AUDIENCE"]


def test_show_prints_an_executor_resolution_in_conflict_with_the_admins(served: Served) -> None:
    record = served.submit(proposal_id="prop_conflict001")
    approved = served.world.approve("alice", record["id"], record["action_hash"]).json()
    approval_id = approved["approval"]["approval_id"]
    executor = served.world.auth("executor")

    def post(receipt: dict[str, Any]) -> Any:
        return served.world.client.post("/v1/outcomes", json={"receipt": receipt}, headers=executor)

    assert post(signed_receipt(approval_id, record["action_hash"], "in_doubt")).status_code == 200
    served.login("admin")
    resolved = served.run(
        "approvals", "resolve", record["id"], "--happened", "--note", "console shows Stopped"
    )
    assert resolved.exit_code == 0, resolved.output
    resolution = {"decision": "did_not_happen", "by": "ops", "at": START + 5, "note": "none"}
    answer = post(
        signed_receipt(
            approval_id, record["action_hash"], "resolved", resolution=resolution, at=START + 5
        )
    )
    assert answer.json()["error"]["code"] == "E_RESOLUTION_CONFLICT"

    result = served.run("approvals", "show", record["id"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # Words for people, never the codes (--json keeps them).
    assert any(x.startswith("resolved   it happened by admin") for x in lines)
    assert any(x.startswith("executor   resolved it did not happen by ops") for x in lines)
    assert any(x.startswith("outcome    in doubt, the executor cannot tell") for x in lines)
    conflict = next(x for x in lines if x.startswith("CONFLICT "))
    assert "the checkpoint says it happened (admin)" in conflict and "cloud" in conflict
    assert "did_not_happen" not in result.stdout and "in_doubt" not in result.stdout
    shown = json.loads(served.run("approvals", "show", record["id"], "--json").stdout)
    assert shown["outcome"]["executor_resolution"]["conflict"] is True


def test_show_of_unknown_or_malformed_id(served: Served) -> None:
    served.login("alice")
    missing = served.run("approvals", "show", "prop_doesnotexist1", "--json")
    assert missing.exit_code == 1
    assert json.loads(missing.stdout)["error"]["code"] == "E_NOT_FOUND"
    # Not an id: refused before anything is spliced into a request path.
    assert served.run("approvals", "show", "../sessions/current").exit_code == 2


def test_a_garbage_id_of_3000_characters_is_clipped_not_echoed_whole(served: Served) -> None:
    served.login("alice")
    garbage = "prop_" + "x" * 2995
    for verb in ("show", "approve"):
        result = served.run("approvals", verb, garbage)
        assert result.exit_code == 2
        assert len(result.output) < 200, result.output
        assert "(3000 characters) is not a proposal id" in result.output


def test_approve_sends_the_hash_it_showed(served: Served) -> None:
    record = served.submit(proposal_id="prop_approve00001")
    served.login("alice")
    result = served.run("approvals", "approve", record["id"], "--yes", "--note", "checked")
    assert result.exit_code == 0, result.output
    shown = _hash_line(result.stdout)
    assert f"you approved action hash {shown}" in result.stdout
    after = served.proposal(record["id"])
    assert after["state"] == "approved"
    assert _statement(after)["action_hash"] == shown == record["action_hash"]
    assert after["votes"][0]["note"] == "checked"


def test_approve_of_a_hash_other_than_the_current_one_is_refused_as_stale(served: Served) -> None:
    reviewed = served.submit(proposal_id="prop_stale000001", resource_id="i-t4n0stale001")
    other = served.submit(proposal_id="prop_stale000002", resource_id="i-t4n0stale002")
    served.login("alice")
    result = served.run(
        "approvals",
        "approve",
        reviewed["id"],
        "--yes",
        "--json",
        "--action-hash",
        other["action_hash"],
    )
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "E_STALE_VIEW"
    # It says which hash was given and which is the proposal's, not "the action changed".
    assert other["action_hash"] in error["message"] and reviewed["action_hash"] in error["message"]
    assert served.proposal(reviewed["id"])["votes"] == []


@pytest.mark.parametrize("given", ["abc", "sha256:" + "A" * 64, "sha256:" + "a" * 63, "a" * 64])
def test_approve_with_a_malformed_action_hash_is_a_usage_error_sent_nowhere(
    served: Served, given: str
) -> None:
    record = served.submit(proposal_id="prop_badhash0001", resource_id="i-t4n0badhash1")
    served.login("alice")
    result = served.run("approvals", "approve", record["id"], "--yes", "--action-hash", given)
    assert result.exit_code == 2, result.output
    assert "is not an action hash" in result.stderr
    assert served.proposal(record["id"])["votes"] == []


def test_confirm_on_a_stop_in_a_script_says_it_is_for_high_risk_actions(served: Served) -> None:
    record = served.submit(proposal_id="prop_confirm0001", resource_id="i-t4n0confirm1")
    served.login("alice")
    result = served.run("approvals", "approve", record["id"], "--confirm", "i-t4n0confirm1")
    assert result.exit_code == 2
    assert "pass --yes" in result.stderr and "only for high-risk actions" in result.stderr
    assert served.proposal(record["id"])["votes"] == []


def test_high_risk_approve_without_confirm_in_a_script_refuses_not_hangs(served: Served) -> None:
    record = served.submit(
        proposal_id="prop_delete00001", resource_id=DELETE_TARGET, operation="delete"
    )
    served.login("alice")
    # No terminal (the runner's stdin is not a tty) and nothing to read: must not wait.
    result = served.run("approvals", "approve", record["id"], "--yes")
    assert result.exit_code == 2
    assert "--confirm RESOURCE_ID" in result.stderr
    assert "PERMANENTLY DELETE" in result.stdout
    assert served.proposal(record["id"])["votes"] == []


def test_high_risk_approve_with_a_wrong_confirm_is_refused_by_the_checkpoint(
    served: Served,
) -> None:
    record = served.submit(
        proposal_id="prop_delete00002", resource_id=DELETE_TARGET, operation="delete"
    )
    served.login("alice")
    result = served.run("approvals", "approve", record["id"], "--confirm", "i-t4n0delete2")
    assert result.exit_code == 1
    assert "refused: E_CONFIRM_MISMATCH" in result.stderr
    assert served.proposal(record["id"])["votes"] == []


def test_high_risk_approve_by_two_people_with_confirm_issues_the_approval(
    served: Served,
) -> None:
    record = served.submit(
        proposal_id="prop_delete00003", resource_id=DELETE_TARGET, operation="delete"
    )
    served.login("alice")
    first = served.run("approvals", "approve", record["id"], "--confirm", DELETE_TARGET)
    assert first.exit_code == 0, first.output
    assert "1 of 2" in first.stdout
    assert "waiting for 1 more" in first.stdout
    again = served.run("approvals", "approve", record["id"], "--confirm", DELETE_TARGET)
    assert again.exit_code == 1
    assert "E_ALREADY_VOTED" in again.stderr
    served.login("bob")
    second = served.run("approvals", "approve", record["id"], "--confirm", DELETE_TARGET, "--json")
    assert second.exit_code == 0, second.output
    body = json.loads(second.stdout)
    assert body["state"] == "approved"
    assert [a["id"] for a in _statement(body)["approvers"]] == ["alice", "bob"]


def test_medium_risk_approve_without_yes_and_without_terminal_refuses(served: Served) -> None:
    record = served.submit(proposal_id="prop_noyes000001")
    served.login("alice")
    result = served.run("approvals", "approve", record["id"])
    assert result.exit_code == 2
    assert "--yes" in result.stderr
    assert served.proposal(record["id"])["votes"] == []


def test_viewer_may_not_approve(served: Served) -> None:
    record = served.submit(proposal_id="prop_viewer00001")
    served.login("viewer")
    result = served.run("approvals", "approve", record["id"], "--yes")
    assert result.exit_code == 1
    assert "E_FORBIDDEN" in result.stderr


def test_reject_with_a_reason_the_agent_reads_back(served: Served) -> None:
    record = served.submit(proposal_id="prop_reject00001")
    served.login("bob")
    result = served.run(
        "approvals", "reject", record["id"], "--reason", "not_idle", "--note", "Sunday batch"
    )
    assert result.exit_code == 0, result.output
    agent_view = served.world.client.get(
        f"/v1/proposals/{record['id']}", headers=served.world.auth("agent")
    ).json()
    assert agent_view["state"] == "rejected"
    assert agent_view["rejection"]["reason_code"] == "not_idle"
    assert agent_view["rejection"]["note"] == "Sunday batch"
    assert f"rejected {record['id']}: not idle, it is in use" in result.stdout
    shown = served.run("approvals", "show", record["id"])
    assert "rejected   not idle, it is in use by bob" in shown.stdout
    assert "not_idle" not in shown.stdout  # the code is for programs: --json
    assert '"not_idle"' in served.run("approvals", "show", record["id"], "--json").stdout


def test_reject_needs_a_known_reason(served: Served) -> None:
    record = served.submit(proposal_id="prop_reject00002")
    served.login("bob")
    assert served.run("approvals", "reject", record["id"]).exit_code == 2
    assert served.run("approvals", "reject", record["id"], "--reason", "Bored!").exit_code == 2
    # A well-formed code the policy does not name (a tool may add its own): the
    # checkpoint is the judge of it.
    unknown = served.run("approvals", "reject", record["id"], "--reason", "bored")
    assert unknown.exit_code == 1 and "E_INVALID" in unknown.stderr
    assert served.proposal(record["id"])["state"] == "pending"


def test_reject_for_other_without_a_note_is_refused_by_the_checkpoint(served: Served) -> None:
    record = served.submit(proposal_id="prop_reject00003")
    served.login("bob")
    for note in ((), ("--note", "   ")):
        result = served.run("approvals", "reject", record["id"], "--reason", "other", *note)
        assert result.exit_code == 1, result.output
        (line,) = result.stderr.strip().splitlines()
        assert "E_NOTE_REQUIRED" in line and "needs a note" in line
    assert served.proposal(record["id"])["state"] == "pending"
    said = served.run(
        "approvals", "reject", record["id"], "--reason", "other", "--note", "owner asked"
    )
    assert said.exit_code == 0, said.output
    assert served.proposal(record["id"])["rejection"]["note"] == "owner asked"


def test_revoke_an_issued_approval(served: Served) -> None:
    record = served.submit(proposal_id="prop_revoke00001")
    served.login("alice")
    assert served.run("approvals", "approve", record["id"], "--yes").exit_code == 0
    result = served.run("approvals", "revoke", record["id"], "--note", "owner objected")
    assert result.exit_code == 0, result.output
    assert served.proposal(record["id"])["state"] == "revoked"
    twice = served.run("approvals", "revoke", record["id"])
    assert twice.exit_code == 1
    assert "E_STATE" in twice.stderr


def test_resolve_is_for_in_doubt_executions_only(served: Served) -> None:
    record = served.submit(proposal_id="prop_resolve0001")
    served.login("admin")
    usage = served.run("approvals", "resolve", record["id"], "--note", "x")
    assert usage.exit_code == 2  # neither --happened nor --did-not-happen
    no_note = served.run("approvals", "resolve", record["id"], "--happened")
    assert no_note.exit_code == 2
    refused = served.run(
        "approvals", "resolve", record["id"], "--did-not-happen", "--note", "console shows Running"
    )
    assert refused.exit_code == 1
    assert "E_STATE" in refused.stderr


def test_approve_on_a_decided_proposal_is_refused_before_sending(served: Served) -> None:
    record = served.submit(proposal_id="prop_decided0001")
    served.login("bob")
    assert (
        served.run(
            "approvals", "reject", record["id"], "--reason", "other", "--note", "no"
        ).exit_code
        == 0
    )
    result = served.run("approvals", "approve", record["id"], "--yes")
    assert result.exit_code == 1
    assert "refused locally, nothing sent: E_STATE" in result.stderr


def test_an_answer_whose_text_does_not_hash_to_its_hash_is_not_trusted(served: Served) -> None:
    record = served.submit(proposal_id="prop_tamper00001")
    body = served.proposal(record["id"])
    tampered = body["action_jcs"].replace("i-t4n0example", "i-t4n0elsewhere")
    with pytest.raises(CheckpointUnavailable, match="does not hash"):
        _signed_action(_Proposal.model_validate({**body, "action_jcs": tampered}))
    lying = body["action_jcs"].replace("i-t4n0example", "i-t4n0elsewhere")
    from airlock.protocol import action_hash

    forged = {**body, "action_jcs": lying, "action_hash": action_hash(lying.encode())}
    with pytest.raises(CheckpointUnavailable, match="does not match its own signed action"):
        _signed_action(_Proposal.model_validate(forged))


def test_hostile_text_is_printed_inert() -> None:
    hostile = "ok\x1b[2J\u202egnp.exe\nline[bold]x[/bold]"
    shown = inert(hostile)
    assert "\x1b" not in shown and "\u202e" not in shown and "\n" not in shown
    assert "\\u001b" in shown and "\\u202e" in shown and "[bold]" in shown


def test_group_help_documents_examples_and_exit_codes() -> None:
    from .conftest import airlock

    top = airlock("--help")
    for command in ("login", "logout", "approvals", "doctor"):
        assert command in top.stdout
    group = airlock("approvals", "--help").stdout
    assert "airlock approvals approve" in group
    assert "Exit codes" in group
    assert "--confirm" in airlock("approvals", "approve", "--help").stdout


def test_a_cursor_that_is_not_a_proposal_id_never_reaches_the_hint_to_paste(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``more:`` line is a command a person pastes into a shell: a checkpoint (or a
    proxy) answering with a cursor like ``$(…)`` must not put it there."""
    _three_states(served)
    real = served.world.checkpoint.list

    def hostile_cursor(principal: Any, **kwargs: Any) -> Any:
        page = real(principal, **kwargs)
        return page.model_copy(update={"next_before": "prop_$(touch /tmp/pwned)"})

    monkeypatch.setattr(served.world.checkpoint, "list", hostile_cursor)
    served.login("alice")
    result = served.run("approvals", "list", "--limit", "1")
    assert result.exit_code == 0, result.output
    assert "$(" not in result.output and "pwned" not in result.output
    assert "cursor is not a proposal id" in result.output


def test_show_writes_the_executions_receipt_that_receipts_verify_checks(
    served: Served, tmp_path: Path
) -> None:
    """receipts verify worked, but nothing said where a receipt file comes from."""
    record = served.submit(proposal_id="prop_receipt0001")
    served.login("alice")
    early = served.run("approvals", "show", record["id"], "--receipt", str(tmp_path / "none"))
    assert early.exit_code == 1 and "no outcome yet" in early.stderr
    assert not (tmp_path / "none").exists()
    approved = served.world.approve("alice", record["id"], record["action_hash"]).json()
    approval_id = approved["approval"]["approval_id"]
    answer = served.world.client.post(
        "/v1/outcomes",
        json={"receipt": signed_receipt(approval_id, record["action_hash"], "succeeded")},
        headers=served.world.auth("executor"),
    )
    assert answer.status_code == 200, answer.text

    path = tmp_path / f"{approval_id}.receipt.json"
    shown = served.run("approvals", "show", record["id"], "--receipt", str(path))
    assert shown.exit_code == 0, shown.output
    assert f"airlock receipts verify {path}" in shown.stderr
    keys = tmp_path / "receipt-keys.json"
    keys.write_text(json.dumps(receipt_keyset().to_value()))
    verified = served.run("receipts", "verify", str(path), "--keys", str(keys))
    assert verified.exit_code == 0, verified.output
    assert verified.stdout.startswith(f"OK: succeeded approval {approval_id}")
    for command in (["approvals", "show"], ["receipts", "verify"]):
        assert "--receipt" in served.run(*command, "--help").stdout
