"""The replay attack of ``eval/attacks/replay.py`` end to end against moto: the stack's
executor daemon (feed, checkpoint, SQLite ledger) writing to a moto server with IAM
enforced, for an EC2 stop, an RDS stop and an EC2 terminate; the executed bundle is then
presented again through ``airlock executor run-bundle``. The judge is moto's own record of
the write requests it received.

A subset of the attack suite, which runs against devcloud only (its rig names instance
ids up front; moto names its own): the attacks that depend on the cloud are the replays
and the drift after approval, and drift runs against moto in the fault sweep
(``test_fault_sweep.py``) and in ``tests/executor/test_moto.py``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.moto import running_moto
from devstack.stack import running_stack
from eval.attacks.rig import bundle_of
from eval.faults import Target
from eval.faults._clouds import Moto, Write
from eval.faults._rig import Rig

pytestmark = pytest.mark.slow

_CLI = [sys.executable, "-c", "from airlock.cli import main; main()"]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    workdir = tmp_path_factory.mktemp("moto-replay")
    with running_moto(workdir) as handle:
        handle.enforce_auth()
        cloud = Moto(handle)
        with running_stack(
            workdir / "stack", webapp=False, executor_env=cloud.executor_env
        ) as stack:
            rig = Rig(stack, cloud)
            try:
                yield rig
            finally:
                rig.close()


@pytest.mark.parametrize(
    ("index", "operation", "write"),
    [
        (0, "stop", "StopInstances"),
        (1, "stop", "StopDBInstance"),
        (2, "delete", "TerminateInstances"),
    ],
)
def test_replay_of_an_executed_bundle_is_refused_with_one_write_by_motos_record(
    rig: Rig, tmp_path: Path, index: int, operation: str, write: str
) -> None:
    target = Target(index, operation, "", f"prop_replay000n{index}")  # type: ignore[arg-type]
    proposal = rig.prepare(target)
    rid = rig.resource_id(target)
    rig.approve(target, proposal)
    record = rig.stack.wait_state(proposal["id"], {"executed"}, timeout=90)
    assert rig.cloud.writes(rid) == [Write(write, rid)]

    path = tmp_path / "bundle.json"
    path.write_bytes(bundle_of(record))
    again = subprocess.run(
        [*_CLI, "executor", "run-bundle", str(path)],
        env=rig.stack.executor.env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 1, again.stdout + again.stderr
    assert "E_REPLAY" in again.stdout + again.stderr
    assert rig.cloud.writes(rid) == [Write(write, rid)], "the replay added no write"
