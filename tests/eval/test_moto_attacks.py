"""The whole attack suite against moto, once per test run: every attack refused, the report
fresh; and RDS stop, the third AWS write, attacked on the same rig.

One rig (``eval/attacks/rig.py`` with ``cloud="moto"``: a moto server with IAM enforced,
the stack's executor daemon on the checkpoint's feed and a second executor on the same
ledger, both writing with the writer's key, and the aux checkpoints) serves the module.
Every registered attack runs against it with AWS-shaped actions (provider ``aws``, EC2
instances); moto's recorder is the judge: no write request under the executors' key for
a refused attack, exactly one where the attack expects the legitimate write. A miss
fails :func:`test_every_attack_is_refused_as_expected_against_moto` with the attack's
line; :func:`test_committed_moto_results_match_a_fresh_run` fails when the committed
``eval/RESULTS-moto.md`` is not what this run renders (rerun
``python -m eval.attacks --cloud moto`` and commit the file).

The attacks' instances are EC2 (stop and terminate); a control terminates one of them as
approved, so the drift attacks' refusals are the drift's. An RDS stop through the same
stack: its replay, and the protect and production tags added between proposal and
approval.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.factory import AWS_ACCOUNT, AWS_REGION
from devstack.moto import MotoHandle
from eval.attacks import Suite, render, run_on, selected
from eval.attacks.clouds import MotoCloud
from eval.attacks.common import approved, delete_action, executor_refusal
from eval.attacks.registry import Target
from eval.attacks.rig import Rig, bundle_of, started_rig
from tests.support.processes import devclouds_under, processes_under

pytestmark = pytest.mark.slow

RESULTS = Path(__file__).resolve().parents[2] / "eval" / "RESULTS-moto.md"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with started_rig(tmp_path_factory.mktemp("moto-attacks"), "moto") as rig:
        yield rig


@pytest.fixture(scope="module")
def suite(rig: Rig) -> Suite:
    lines: list[str] = []
    result = run_on(rig, selected(), progress=lines.append)
    print("\n".join(lines))  # shown with -s, or for a failing test
    return result


def _moto(rig: Rig) -> MotoHandle:
    assert isinstance(rig.cloud, MotoCloud)
    return rig.cloud.moto


def test_every_attack_is_refused_as_expected_against_moto(suite: Suite) -> None:
    assert suite.cloud == "moto"
    assert [r.attack.name for r in suite.results] == [a.name for a in selected()]
    misses = [
        f"{r.attack.name}: expected {r.attack.expect}, observed {r.observed.code}, "
        f"{r.writes} unapproved write(s); audit: {r.observed.audit}"
        for r in suite.misses
    ]
    assert not misses, "\n".join(misses)
    assert all(suite.chains.values()), suite.chains
    # The replays' legitimate writes were counted by moto's record: exactly one each.
    assert sum(r.observed.approved_writes for r in suite.results) >= 8


def test_committed_moto_results_match_a_fresh_run(suite: Suite) -> None:
    committed = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    assert committed == render(suite), (
        "eval/RESULTS-moto.md differs from a fresh run: run "
        "`python -m eval.attacks --cloud moto` and commit it"
    )


def test_a_stack_on_moto_runs_no_devcloud(rig: Rig) -> None:
    """No devcloud process, state or handle beside moto (tests/devstack/test_stack.py
    shows the probe sees one that runs)."""
    assert len(processes_under(rig.workdir)) >= 5  # the rig's own services are seen
    assert devclouds_under(rig.workdir) == []
    assert not (rig.stack.workdir / "devcloud").exists()
    assert rig.stack.devcloud_handle is None
    with pytest.raises(RuntimeError, match="no devcloud"):
        _ = rig.stack.devcloud


def test_a_write_moto_is_told_to_slow_is_held_and_a_read_is_not(rig: Rig) -> None:
    moto = _moto(rig)
    (rid,) = moto.seed_ec2(AWS_REGION, 1)
    ec2 = moto.client("ec2", AWS_REGION)
    # A hold a read under a loaded runner's stall (seconds) stays short of; a read that
    # was held too would take all of it.
    moto.set_write_latency(3000)
    try:
        start = time.monotonic()
        ec2.describe_instances(InstanceIds=[rid])
        read = time.monotonic() - start
        start = time.monotonic()
        ec2.stop_instances(InstanceIds=[rid])
        write = time.monotonic() - start
    finally:
        moto.set_write_latency(0)
    assert write >= 3.0
    assert read < 3.0


def test_an_approved_terminate_of_an_attacks_instance_is_written_once(rig: Rig) -> None:
    """The control for the drift attacks on deletes: an instance set aside the way theirs
    are, stopped and unchanged, is terminated, so their refusals are the drift's."""
    t = Target("control-terminate", rig.cloud)
    record = approved(rig, rig.cp, delete_action(t), status="Stopped")
    rig.wait_executed_by_e1(record["approval"]["approval_id"], {"succeeded"})
    rid = t.instance(0)
    assert [w.action for w in _moto(rig).writes(key="writer", resource_id=rid)] == [
        "TerminateInstances"
    ]


def _rds_stop(rig: Rig, name: str) -> dict[str, object]:
    _moto(rig).seed_rds(AWS_REGION, name)
    t = Target(f"rds-{name}", rig.cloud)
    return rig.cloud.action(
        proposal_id=t.proposal(), resource={"type": "rds.instance", "id": name}, params={}
    )


def test_replay_of_an_executed_rds_stop_is_refused_with_one_write_by_motos_record(
    rig: Rig,
) -> None:
    action = _rds_stop(rig, "replay-rds")
    record = approved(rig, rig.cp, action, create=False)
    rig.wait_executed_by_e1(record["approval"]["approval_id"], {"succeeded"})
    record = rig.cp.wait_state(record["id"], {"executed"})
    assert [w.action for w in _moto(rig).writes(key="writer", resource_id="replay-rds")] == [
        "StopDBInstance"
    ]

    res = rig.present(bundle_of(record), "rds-replay")
    obs = executor_refusal(rig, res, ("replay-rds",), approved_writes=1)
    assert (obs.code, obs.audit_ok) == ("E_REPLAY", True), obs.audit
    assert rig.writes("replay-rds") == 1, "the replay added no write"


@pytest.mark.parametrize(
    ("name", "tag"),
    [("drift-rds-protect", ("airlock:protect", "true")), ("drift-rds-prod", ("env", "production"))],
)
def test_a_tag_added_to_an_rds_instance_after_the_proposal_is_refused_with_zero_writes(
    rig: Rig, name: str, tag: tuple[str, str]
) -> None:
    action = _rds_stop(rig, name)
    record = rig.cp.submit(action)
    _moto(rig).client("rds", AWS_REGION).add_tags_to_resource(
        ResourceName=f"arn:aws:rds:{AWS_REGION}:{AWS_ACCOUNT}:db:{name}",
        Tags=[{"Key": tag[0], "Value": tag[1]}],
    )
    rig.cp.approve(record, "alice")
    approval_id = rig.cp.view(record["id"])["approval"]["approval_id"]
    row = rig.wait_executed_by_e1(approval_id, {"refused", "succeeded", "failed", "in_doubt"})
    assert (row["state"], row["refusal_code"]) == ("refused", "E_PRECONDITION")
    assert rig.writes(name) == 0
