"""What each OS process of the gate's multi-process tests runs (spawned, so a fresh
interpreter): a gate of its own over the shared ledger, and a guarded refund whose body
appends its effect key to a counter file — the count the tests read, not the gate's."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from airlock.gate import Gate, GateConfig, InDoubt, Pending, Refused


def gate_config(values: dict[str, Any]) -> GateConfig:
    """The config :func:`config_values` made plain values of."""
    return GateConfig(
        **{
            **values,
            "keys": Path(values["keys"]),
            "receipt_key": Path(values["receipt_key"]),
        }
    )


def config_values(config: GateConfig) -> dict[str, Any]:
    """A config as a spawned process receives it (plain values)."""
    return {
        "checkpoint_url": config.checkpoint_url,
        "token": config.token,
        "keys": str(config.keys),
        "audience": config.audience,
        "ledger_url": config.ledger_url,
        "receipt_key": str(config.receipt_key),
        "lease_seconds": config.lease_seconds,
    }


def counted(counter: Path) -> list[str]:
    """The effect keys the refund body ran for, one line each."""
    return counter.read_text().split() if counter.exists() else []


def _refund(gate: Gate, counter: Path, *, lookup: bool) -> Any:
    @gate.guard(
        risk="high",
        target=lambda order: order,
        effect_key=lambda order: f"refund:{order}",
        lookup=(lambda key: key in counted(counter)) if lookup else None,
        wait=60.0,
    )
    def refund(order: str, *, idempotency_key: str) -> str:
        # One write of one short line with O_APPEND: never interleaved with another's.
        with counter.open("a") as out:
            out.write(idempotency_key + "\n")
        return order

    return refund


def call_effects(
    values: dict[str, Any],
    counter: str,
    orders: list[str],
    barrier: Any,
    results: str,
    *,
    failpoints: str = "",
) -> None:
    """Wait at the barrier, then call the refund of each order; write what each did and
    how long the calls took."""
    if failpoints:
        os.environ["AIRLOCK_ENV"] = "dev"
        os.environ["AIRLOCK_GATE_FAILPOINTS"] = failpoints
    gate = Gate(gate_config(values))
    refund = _refund(gate, Path(counter), lookup=True)
    if barrier is not None:
        barrier.wait()
    started = time.monotonic()
    done: dict[str, str] = {}
    for order in orders:
        try:
            refund(order)
            done[order] = "ran"
        except Refused as exc:
            done[order] = exc.code
        except (Pending, InDoubt) as exc:
            done[order] = type(exc).__name__
    Path(results).write_text(json.dumps({"done": done, "seconds": time.monotonic() - started}))
    gate.close()


def recover(values: dict[str, Any], counter: str, lookup: bool, ahead: int, results: str) -> None:
    """A fresh process's recovery, its clock ``ahead`` seconds on (past the lease)."""
    gate = Gate(gate_config(values), now=lambda: time.time() + ahead)
    _refund(gate, Path(counter), lookup=lookup)
    settled = gate.recover()
    Path(results).write_text(json.dumps([list(s) for s in settled]))
    gate.close()
