"""The attacks of ``eval/attacks`` that depend on the cloud, end to end against moto: the
stack's executor daemon (feed, checkpoint, SQLite ledger) writing to a moto server with
IAM enforced, for EC2 stop, RDS stop and EC2 terminate. The judge is moto's own record of
the write requests it received.

* replay (``eval/attacks/replay.py``): the executed bundle presented again through
  ``airlock executor run-bundle`` is refused ``E_REPLAY``, and the write stays one;
* drift (``eval/attacks/drift.py``): the resource changes out of band between the
  proposal and the approval (stopped, started again, tagged ``airlock:protect`` or
  production, terminated) and the executor's re-read refuses ``E_PRECONDITION`` with no
  write.

A subset of the attack suite, which runs against devcloud only: its rig names instance
ids up front, and moto names its own. The other attacks (bundle, checkpoint API,
injection, web app, start-up) never reach the cloud. One stack for the module (~20 s).
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
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
_ids = itertools.count()


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
    target = Target(index, operation, "", f"prop_replay{next(_ids):03d}n{index}")  # type: ignore[arg-type]
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


def _refusal_code(rig: Rig, approval_id: str) -> str | None:
    path = rig.stack.ledger_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        row = conn.execute(
            "SELECT refusal_code FROM executor_ledger WHERE approval_id = ?", (approval_id,)
        ).fetchone()
    return None if row is None else row[0]


@pytest.mark.parametrize(
    ("index", "operation", "drift"),
    [
        (0, "stop", "status"),  # EC2 stopped by a person
        (0, "stop", "protect"),  # EC2 tagged airlock:protect
        (1, "stop", "protect"),  # RDS tagged airlock:protect
        (1, "stop", "production"),  # RDS tagged env=production
        (0, "stop", "gone"),  # EC2 terminated by a person
        (2, "delete", "status"),  # a stopped EC2 started again by a person
    ],
)
def test_drift_after_the_proposal_is_refused_with_zero_writes_by_motos_record(
    rig: Rig, index: int, operation: str, drift: str
) -> None:
    target = Target(index, operation, "", f"prop_drift{next(_ids):03d}n{index}")  # type: ignore[arg-type]
    proposal = rig.prepare(target)
    rid = rig.resource_id(target)
    assert isinstance(rig.cloud, Moto)
    if drift == "production":
        arn = f"arn:aws:rds:us-east-1:123456789012:db:{rid}"
        rig.cloud.moto.client("rds").add_tags_to_resource(
            ResourceName=arn, Tags=[{"Key": "env", "Value": "production"}]
        )
    else:
        rig.cloud.drift(target, rid, drift)
    approval_id, _ = rig.approve(target, proposal)
    rig.stack.wait_state(proposal["id"], {"refused"}, timeout=90)
    assert _refusal_code(rig, approval_id) == "E_PRECONDITION"
    assert rig.cloud.writes(rid) == []
