"""What the CLI prints from outside its process never reaches a terminal raw.

A checkpoint (or whatever answers at its URL), an executor's ledger (which quotes the
cloud), an audit chain or export, a receipt file can say anything. The attacks below
send C1 controls (U+009B is a CSI on its own, U+009D an OSC), DEL, bidi overrides and
isolates, other format characters, a line separator, a no-break space and a tag
character above U+FFFF, and hold every output to: each character is printable (the
lines' own newlines aside), JSON stays JSON with the same value, and printable
non-ASCII text stays readable. The hostile checkpoint is a fake on a real loopback
socket (tests/support/dripping.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoint.harness import START
from tests.support.dripping import Answer, serving_drips

from .conftest import Served, airlock

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


def test_a_lone_surrogate_from_a_checkpoint_is_printed_as_json_not_a_crash(
    served: Served, offline: Path
) -> None:
    # JSON's \ud800 parses to a lone surrogate, which no terminal encoding can write.
    record = {**served.submit(proposal_id="prop_lone00000001"), "banner": "a\ud800b"}
    with serving_drips([_answer(200, record)]) as fake:
        result = airlock(
            "approvals", "show", record["id"], "--json", env=_token_env(fake.url, offline)
        )
    assert result.exit_code == 0, result.output
    assert '"banner": "a\\ud800b"' in result.stdout
    assert json.loads(result.stdout)["banner"] == "a\ud800b"


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
