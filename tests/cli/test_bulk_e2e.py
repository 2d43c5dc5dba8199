"""Twenty proposals approved in one CLI action reach the cloud exactly once each.

The whole stack on loopback (devstack/stack.py: devcloud, the checkpoint, the
executor daemon): ``airlock approvals approve`` with 21 ids and one confirmation, during
which the agent withdraws one. The judge is devcloud's write log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.stack import PASSWORD, Stack, running_stack
from tests.support.bulk import assert_each_executed_once, submit_batch

from .conftest import airlock


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("stack"), webapp=False) as s:
        yield s


def test_twenty_approved_in_one_cli_action_execute_once_each_and_one_withdrawn_is_named(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airlock.cli import _bulk

    records = submit_batch(stack, "clibulk", 21)
    gone = records[7]
    env = {"AIRLOCK_HOME": str(tmp_path / "home")}
    login = airlock(
        "login",
        "--url",
        stack.checkpoint_url,
        "--username",
        "alice",
        "--password-stdin",
        stdin=PASSWORD + "\n",
        env=env,
    )
    assert login.exit_code == 0, login.output

    def confirmed_then_the_agent_withdraws(count: int, verb: str, *, yes: bool) -> None:
        assert (count, verb) == (21, "approve")
        response = stack._http.post(
            f"/v1/proposals/{gone['id']}/withdraw",
            json={"note": "running again"},
            headers=stack.auth("agent"),
        )
        assert response.status_code == 200, response.text

    monkeypatch.setattr(_bulk, "_confirm", confirmed_then_the_agent_withdraws)
    result = airlock("approvals", "approve", *(r["id"] for r in records), "--yes", env=env)
    assert result.exit_code == 1, result.output
    refused = [line for line in result.output.splitlines() if line.startswith("refused")]
    assert len(refused) == 1 and gone["id"] in refused[0], result.output
    assert "approve: 20 of 21 decided" in result.output
    assert_each_executed_once(stack, [r for r in records if r is not gone], [gone])
