"""What the loop's multi-process tests run in a spawned interpreter: a gate and an agent
of its own over the shared ledger and run files, one ``run`` or ``resume``, its result
written as JSON. The refund's effect keys go to a counter file the test reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airlock.agents import Agent, Done, ScriptedProvider
from airlock.gate import Gate
from tests.gate.workers import gate_config

from .support import SCRIPT, Payments


def step(values: dict[str, Any], files: dict[str, str], command: str, arg: str) -> None:
    """``run`` the task ``arg`` or ``resume`` the run ``arg``; write what came back."""
    gate = Gate(gate_config(values))
    try:
        payments = Payments(counter=Path(files["counter"]))
        agent = Agent(ScriptedProvider(SCRIPT), payments.tools(), gate=gate, state=files["state"])
        result = agent.run(arg) if command == "run" else agent.resume(arg)
        out: dict[str, Any] = {"run_id": result.run_id}
        if isinstance(result, Done):
            out |= {"done": True, "text": result.text}
        else:
            out |= {"done": False, "proposal_id": result.proposal_id}
        Path(files["out"]).write_text(json.dumps(out))
    finally:
        gate.close()
