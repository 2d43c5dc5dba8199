"""The loop across real processes: a run started in one interpreter pauses at the
sensitive tool, a person approves, and another interpreter resumes it; the refund's
counter file, written by the tool itself, shows one call."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

from tests.gate.support import FakeCheckpoint, gate_files
from tests.gate.workers import config_values

from . import workers

_SPAWN = multiprocessing.get_context("spawn")
#: A process that does not finish in this long is a failure, not a wait.
_JOIN_S = 90.0


def _step(values: dict[str, Any], tmp: Path, command: str, arg: str) -> dict[str, Any]:
    out = tmp / f"out-{command}-{len(list(tmp.glob('out-*')))}.json"
    files = {"counter": str(tmp / "counter"), "state": str(tmp / "runs.db"), "out": str(out)}
    process = _SPAWN.Process(target=workers.step, args=(values, files, command, arg))
    process.start()
    process.join(_JOIN_S)
    assert process.exitcode == 0, f"an agent process ended {process.exitcode}"
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _counted(tmp: Path) -> list[str]:
    counter = tmp / "counter"
    return counter.read_text().split() if counter.exists() else []


def test_a_run_paused_in_one_process_is_resumed_in_another_and_runs_once(
    tmp_path: Path,
) -> None:
    fake = FakeCheckpoint()
    with fake.serve() as url:
        config = gate_files(
            tmp_path, checkpoint_url=url, ledger_url=f"sqlite:///{tmp_path / 'gate.db'}"
        )
        values = config_values(config)
        paused = _step(values, tmp_path, "run", "Refund order 881 in full")
        assert paused["done"] is False
        assert paused["proposal_id"] == fake.only()
        assert _counted(tmp_path) == []

        fake.approve(fake.only())
        done = _step(values, tmp_path, "resume", paused["run_id"])
        assert done == {"run_id": paused["run_id"], "done": True, "text": "final: re_order-881"}
        assert _counted(tmp_path) == ["refund:order-881"]
