"""The stack on loopback: a stack whose executor writes to another cloud runs no devcloud."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.devcloud import running_devcloud
from devstack.stack import running_stack
from tests.support.processes import devclouds_under


def test_a_stack_without_devcloud_or_a_cloud_key_is_refused_before_starting(
    tmp_path: Path,
) -> None:
    # Without a key of its own a dev executor would write to a devcloud nobody started.
    workdir = tmp_path / "stack"
    with (
        pytest.raises(ValueError, match="without devcloud"),
        running_stack(workdir, devcloud=False, executor_env={"AIRLOCK_EXECUTOR_PROVIDER": "aws"}),
    ):
        pass
    assert not workdir.exists()


def test_the_probe_sees_a_running_devcloud(tmp_path: Path) -> None:
    # The control for tests/eval/test_moto_attacks.py, which asserts the probe finds none.
    with running_devcloud(tmp_path / "devcloud") as devcloud:
        assert devclouds_under(tmp_path) == [devcloud.pid]
    assert devclouds_under(tmp_path) == []
