"""What the CLI prints from outside its process never reaches a terminal raw.

A checkpoint (or whatever answers at its URL), an executor's ledger (which quotes the
cloud), an audit chain or export, a receipt file can say anything. The attacks below
send C1 controls (U+009B is a CSI on its own, U+009D an OSC), DEL, bidi overrides and
isolates, other format characters, a line separator, a no-break space and a tag
character above U+FFFF, and hold every output to: each character is printable (the
lines' own newlines aside), JSON stays JSON with the same value, and printable
non-ASCII text stays readable. The hostile checkpoint is a fake on a real loopback
socket (tests/support/dripping.py); the audit chain is a real checkpoint's database, and
``export`` runs as a real process on a pty.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airlock.protocol import KeySet, canonical_bytes
from airlock.store import AuditLog, export, read_transaction
from tests.checkpoint.harness import START
from tests.executor.support import receipt_signer
from tests.support.dripping import Answer, serving_drips

from .conftest import Served, airlock, in_terminal

#: None of it printable: a CSI (clear the screen), an OSC (set the title, ended by BEL),
#: DEL, a right-to-left override, a left-to-right isolate, a zero-width space, a line
#: separator, a no-break space, and a tag "A" (invisible, above U+FFFF).
HOSTILE = "\x9b2J\x9d0;pwned\x07\x7f\u202egnp.exe\u2066\u200b\u2028\xa0\U000e0041"
#: Printable and not ASCII: shown as it is.
READABLE = "café 中文 😀"


def _raw(text: str) -> list[str]:
    """The characters of ``text`` a terminal would get raw that are not printable."""
    return [c for c in text if not (c.isprintable() or c == "\n")]


def _answer(status: int, body: Any = None) -> Answer:
    """A whole HTTP answer; ``body`` as ASCII JSON (its escapes are what the CLI parses)."""
    data = b"" if body is None else json.dumps(body).encode()
    reason = {200: "OK", 204: "No Content", 409: "Conflict"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return Answer(head.encode() + b"\r\n" + data)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No proxy and no developer's file in the way; the session directory."""
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)  # the CLI follows them: not to this test
    monkeypatch.chdir(tmp_path)  # doctor and settings read ./.env
    return tmp_path / "home"


def _token_env(url: str, home: Path) -> dict[str, str]:
    return {"AIRLOCK_TOKEN": "x" * 40, "AIRLOCK_CHECKPOINT_URL": url, "AIRLOCK_HOME": str(home)}


def _hostile_record(served: Served, proposal_id: str) -> dict[str, Any]:
    """A real proposal record (its signed action checks out) with hostile text in every
    field the CLI prints that the signature does not cover, and in one it does not know."""
    record = served.submit(proposal_id=proposal_id)
    return {
        **record,
        "state": "approved" + HOSTILE,
        "risk": "medium" + HOSTILE,
        "deny_reason": READABLE + HOSTILE,
        "policy": {**record["policy"], "effect": "approve" + HOSTILE, "hash": HOSTILE},
        "votes": [{"voter": "alice" + HOSTILE, "at": START, "note": HOSTILE, "counts": True}],
        "approval": {
            "approval_id": "apv_" + HOSTILE,
            "keyid": "ed25519:" + HOSTILE,
            "issued_at": START,
            "expires_at": START + 900,
            "revoked_at": None,
            "revoked_by": None,
            # Not printed by show; --json relays it as it came.
            "envelope": {"payloadType": HOSTILE, "payload": "", "signatures": []},
        },
        "banner": HOSTILE,  # a field this CLI does not know: --json prints it all the same
    }


def test_a_hostile_checkpoint_cannot_send_terminal_controls_through_json_output(
    served: Served, offline: Path
) -> None:
    record = _hostile_record(served, "prop_json00000001")
    page = {"items": [record], "next_before": None}
    with serving_drips([_answer(200, record), _answer(200, page)]) as fake:
        env = _token_env(fake.url, offline)
        shown = airlock("approvals", "show", record["id"], "--json", env=env)
        listed = airlock("approvals", "list", "--json", env=env)
    for result, sent in ((shown, record), (listed, page)):
        assert result.exit_code == 0, result.output
        assert _raw(result.stdout) == []
        assert json.loads(result.stdout) == json.loads(json.dumps(sent))  # the same value
        assert READABLE in result.stdout  # not escaped: readable as it is
        assert "\\u009b2J\\u009d0;pwned\\u0007\\u007f\\u202egnp.exe" in result.stdout
        assert "\\udb40\\udc41" in result.stdout  # above U+FFFF: a JSON surrogate pair


def test_a_lone_surrogate_from_a_checkpoint_is_refused_not_a_crash(
    served: Served, offline: Path
) -> None:
    # JSON's \ud800 parses to a lone surrogate, which no terminal encoding can write; the
    # CLI reads answers strictly (docs/protocol.md#strict-json), so it is refused (exit 3) before
    # printing.
    record = {**served.submit(proposal_id="prop_lone00000001"), "banner": "a\ud800b"}
    with serving_drips([_answer(200, record)]) as fake:
        result = airlock(
            "approvals", "show", record["id"], "--json", env=_token_env(fake.url, offline)
        )
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    assert "did not answer JSON: lone surrogate in string" in result.stderr


def test_a_hostile_checkpoint_cannot_send_terminal_controls_through_what_show_prints(
    served: Served, offline: Path
) -> None:
    record = _hostile_record(served, "prop_plain0000001")
    with serving_drips([_answer(200, record)]) as fake:
        result = airlock("approvals", "show", record["id"], env=_token_env(fake.url, offline))
    assert result.exit_code == 0, result.output
    assert _raw(result.stdout) == []
    assert f"proposal   {record['id']}  (approved\\u009b2J" in result.stdout
    assert f"denied     {READABLE}\\u009b2J" in result.stdout


def test_a_hostile_checkpoint_cannot_send_terminal_controls_through_a_refusal(
    offline: Path,
) -> None:
    refusal = {"error": {"code": "E_STATE" + HOSTILE, "message": READABLE + HOSTILE}}
    with serving_drips([_answer(409, refusal)]) as fake:
        env = _token_env(fake.url, offline)
        plain = airlock("approvals", "revoke", "prop_refused00001", env=env)
        scripted = airlock("approvals", "revoke", "prop_refused00001", "--json", env=env)
    assert plain.exit_code == scripted.exit_code == 1, plain.output
    assert _raw(plain.stderr) == [] and _raw(scripted.stderr) == []
    assert "refused: E_STATE\\u009b2J\\u009d0;pwned\\u0007\\u007f\\u202e" in plain.stderr
    assert READABLE in plain.stderr
    assert _raw(scripted.stdout) == []
    assert json.loads(scripted.stdout) == refusal


def test_a_hostile_checkpoint_cannot_send_terminal_controls_through_login_and_logout(
    offline: Path,
) -> None:
    session = {
        "token": "s" * 40,
        "expires_at": START,
        "username": "alice" + HOSTILE,
        "role": "approver" + HOSTILE,
    }
    with serving_drips([_answer(200, session), _answer(204)]) as fake:
        env = {"AIRLOCK_HOME": str(offline)}
        login = airlock(
            "login", "--url", fake.url, "-u", "alice", "--password-stdin", stdin="pw\n", env=env
        )
        logout = airlock("logout", env=env)  # the name kept in the session file
    assert login.exit_code == 0, login.output
    assert logout.exit_code == 0, logout.output
    for result in (login, logout):
        assert _raw(result.output) == []
        assert "alice\\u009b2J" in result.stdout


def test_a_hostile_checkpoint_cannot_send_terminal_controls_through_doctor(
    offline: Path,
) -> None:
    not_ready = {"error": {"code": "E_NOT_READY" + HOSTILE, "message": HOSTILE}}
    with serving_drips([_answer(200, {}), _answer(409, not_ready)]) as fake:
        result = airlock("doctor", "--url", fake.url, env={"AIRLOCK_HOME": str(offline)})
    assert result.exit_code == 1, result.output
    assert _raw(result.output) == []
    assert "checkpoint.readyz" in result.stdout and "E_NOT_READY\\u009b2J" in result.stdout


def test_a_signed_receipt_quoting_the_cloud_cannot_send_terminal_controls_through_verify(
    tmp_path: Path,
) -> None:
    from services.executor import Receipt

    signer = receipt_signer()
    receipt = Receipt.model_validate(
        {
            "type": "airlock.receipt/v1",
            "executor": "airlock-executor/test",
            "approval_id": "apv_verify0000001",
            "action_hash": "sha256:" + "0" * 64,
            "outcome": "failed",
            "verified": False,
            "refusal_code": None,
            "cloud_request_id": None,
            "resolution": None,
            "at": START,
            "audit_head": {"seq": 1, "hash": "sha256:" + "0" * 64},
            # A provider's error message quotes what it was given, a tag value say.
            "detail": f"InvalidTag.Value: the tag value {HOSTILE} is not allowed",
        }
    )
    file, keys = tmp_path / "apv.receipt.json", tmp_path / "receipt-keys.json"
    file.write_bytes(canonical_bytes(signer.sign(receipt).to_value()))
    keys.write_bytes(canonical_bytes(KeySet([signer.trusted_key()]).to_value()))
    result = airlock("receipts", "verify", str(file), "--keys", str(keys))
    assert result.exit_code == 0, result.output
    assert _raw(result.output) == []
    assert "the tag value \\u009b2J" in result.stdout


def _hostile_chain(served: Served) -> str:
    """The checkpoint's database URL, its chain holding an event of anyone's text: an
    export verifies from genesis whoever wrote it, and a database row is what it says."""
    event = {
        "type": "checkpoint.approval.issued",
        "proposal_id": "prop_trace0000001",
        "approval_id": "apv_" + HOSTILE,
        "note": READABLE + HOSTILE,
    }
    with served.world.checkpoint.engine.begin() as conn:
        AuditLog.append(conn, event, at=datetime.fromtimestamp(START, UTC))
    return served.world.url


def test_a_hostile_audit_event_cannot_send_terminal_controls_through_trace(
    served: Served,
) -> None:
    db = _hostile_chain(served)
    plain = airlock("audit", "trace", "prop_trace0000001", "--checkpoint-db", db)
    scripted = airlock("audit", "trace", "prop_trace0000001", "--checkpoint-db", db, "--json")
    assert plain.exit_code == scripted.exit_code == 0, plain.output
    assert _raw(plain.stdout) == [] and _raw(scripted.stdout) == []
    assert "approval apv_\\u009b2J" in plain.stdout  # the linked id, as trace escapes text
    [event] = json.loads(scripted.stdout)["events"]
    assert event["approval_id"] == "apv_" + HOSTILE
    assert READABLE in scripted.stdout


def test_a_hostile_audit_event_cannot_send_terminal_controls_through_export_on_a_terminal(
    served: Served, tmp_path: Path
) -> None:
    db = _hostile_chain(served)
    with read_transaction(served.world.checkpoint.engine) as conn:
        exported = list(export(conn))
    code, output = in_terminal(tmp_path / "home", ["audit", "export", "--db", db])
    assert code == 0, output
    lines = [line for line in output.replace("\r\n", "\n").split("\n") if line]
    assert _raw(output.replace("\r\n", "\n")) == []
    # On a terminal: the same JSON values, escaped. To a pipe: the very bytes hashed.
    assert [json.loads(line) for line in lines] == [json.loads(line) for line in exported]
    assert READABLE in output
    piped = airlock("audit", "export", "--db", db)
    assert piped.exit_code == 0, piped.output
    assert piped.stdout.split("\n") == [*exported, ""]


def test_a_hostile_env_file_cannot_send_terminal_controls_through_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(f"AIRLOCK_EXECUTOR_AUDIENCE=prod{HOSTILE}\n")
    result = airlock("config", "executor", env={"AIRLOCK_ENV": "dev"})
    assert result.exit_code == 0, result.output
    assert _raw(result.stdout) == []
    assert "AIRLOCK_EXECUTOR_AUDIENCE" in result.stdout and "prod\\u009b2J" in result.stdout


def test_cloud_and_checkpoint_text_in_the_agents_table_is_escaped() -> None:
    from airlock.cli._agent import _table
    from services.agent.service import PlannedRow, RunReport

    row = PlannedRow(
        "problem", "stop", "ap-southeast-1", "i-" + HOSTILE, "", detail="refused: " + HOSTILE
    )
    table = _table(RunReport(started_at=START, dry_run=True, rows=[row]))
    assert _raw(table) == []
    assert "i-\\u009b2J" in table and "refused: \\u009b2J" in table


def test_a_cloud_error_in_an_outcome_cannot_send_terminal_controls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from airlock.cli._executor import show_outcome
    from services.executor import Outcome, State

    show_outcome(Outcome("apv_show00000001", State.FAILED, detail="InvalidParameter: " + HOSTILE))
    out = capsys.readouterr().out
    assert _raw(out) == []
    assert "apv_show00000001 failed InvalidParameter: \\u009b2J" in out


def test_a_service_log_cannot_send_terminal_controls_through_up(tmp_path: Path) -> None:
    from airlock.cli._stack import Service, Stack

    log = tmp_path / "executor.log"
    log.write_text(f"write failed: {HOSTILE}\nnext line\n")
    stack = Stack(tmp_path, {"webapp": 1, "checkpoint": 2, "devcloud": 3}, 1, 1)
    tail = stack.tail(Service("executor", [], {}, lambda: True, log))
    assert _raw(tail) == []
    assert tail.splitlines()[0].startswith("    write failed: \\u009b2J")


def test_a_logged_answer_cannot_forge_or_redraw_the_executors_log() -> None:
    from airlock.cli._text import InertLogFormatter

    record = logging.LogRecord(
        "airlock.executor", logging.WARNING, __file__, 1, "checkpoint said %s", (HOSTILE,), None
    )
    try:
        raise RuntimeError("cloud said\n" + HOSTILE)
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    line = InertLogFormatter("%(name)s %(message)s").format(record)
    assert _raw(line) == []
    assert line.startswith("airlock.executor checkpoint said \\u009b2J")
    assert "RuntimeError: cloud said\n\\u009b2J" in line  # a traceback keeps its lines
