"""The CLI reads the checkpoint's answers as strict JSON (docs/protocol.md#strict-json), or not at
all (exit 3).

Python's ``json.loads`` (what ``response.json()`` is) keeps the last of duplicate keys
and accepts ``NaN`` and lone surrogates: a checkpoint, or a proxy in front of it, could
show a person one value while any other parser of the same bytes reads another. Each
answer here comes from a fake checkpoint on a real loopback socket
(tests/support/dripping.py), built from a real record where a real one is needed.
"""

from __future__ import annotations

import json

import pytest

from tests.support.dripping import Answer, ok_json, serving_drips

from .conftest import Served, airlock


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)  # the CLI follows them: not to this test


def _answer(status: str, body: bytes) -> Answer:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return Answer(head + body)


def _run(answer: Answer, *args: str) -> tuple[int, str, str]:
    with serving_drips([answer]) as server:
        env = {"AIRLOCK_TOKEN": "x" * 40, "AIRLOCK_CHECKPOINT_URL": server.url}
        result = airlock(*args, env=env)
    return result.exit_code, result.stdout, result.stderr


def test_a_checkpoint_answer_with_a_duplicate_key_is_refused_not_read_last_wins(
    served: Served,
) -> None:
    record = served.submit(proposal_id="prop_duplicate01")
    body = served.proposal(record["id"])
    assert body["state"] == "pending"
    text = json.dumps(body)
    # The same record with a second "state": last-wins reads it as executed.
    assert text.endswith("}")
    doubled = (text[:-1] + ', "state": "executed"}').encode()
    assert json.loads(doubled)["state"] == "executed"

    code, stdout, stderr = _run(ok_json(doubled), "approvals", "show", record["id"])
    assert code == 3, stdout + stderr
    assert "executed" not in stdout + stderr
    assert "did not answer JSON: duplicate key 'state'" in stderr

    code, stdout, stderr = _run(ok_json(doubled), "approvals", "show", record["id"], "--json")
    assert code == 3, stdout + stderr
    assert stdout == ""


def test_a_refusal_with_a_duplicate_code_is_refused_not_read_last_wins() -> None:
    doubled = b'{"error": {"code": "E_FORBIDDEN", "message": "no", "code": "E_HARMLESS"}}'
    code, stdout, stderr = _run(_answer("403 Forbidden", doubled), "approvals", "list")
    assert code == 3, stdout + stderr
    assert "E_HARMLESS" not in stdout + stderr
    assert "not the checkpoint API" in stderr


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_checkpoint_answer_with_nan_or_infinity_is_refused(constant: str) -> None:
    page = f'{{"items": [], "next_before": null, "total": {constant}}}'.encode()
    code, stdout, stderr = _run(ok_json(page), "approvals", "list", "--json")
    assert code == 3, stdout + stderr
    assert stdout == ""
    assert f"{constant} is not JSON" in stderr


def test_a_checkpoint_answer_with_a_lone_surrogate_is_refused() -> None:
    page = b'{"items": [], "next_before": "prop_\\ud800aaaaaaaa"}'
    code, stdout, stderr = _run(ok_json(page), "approvals", "list")
    assert code == 3, stdout + stderr
    assert "lone surrogate" in stderr


def test_a_checkpoint_answer_in_invalid_utf8_is_refused_saying_why() -> None:
    """Refused before too (exit 3), with no reason: the reason is new."""
    page = b'{"items": [], "next_before": "prop_\xff\xfeaaaaaaaa"}'
    code, stdout, stderr = _run(ok_json(page), "approvals", "list")
    assert code == 3, stdout + stderr
    assert "invalid UTF-8" in stderr


def test_a_strict_answer_is_still_read() -> None:
    """Text that is not NFC is allowed: the API relays text (notes, names) it did not write."""
    page = '{"items": [], "next_before": "prop_e\u0301aaaaaaaaa"}'.encode()
    code, stdout, stderr = _run(ok_json(page), "approvals", "list")
    assert code == 0, stdout + stderr
    assert "no proposals match" in stdout
