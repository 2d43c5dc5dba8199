"""The tests' world: a payments service whose tools count their calls, the fake
checkpoint, and new "processes" (a Gate and an Agent) over the same SQLite files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airlock.agents import Agent, Provider, Risk, ScriptedProvider, Tool
from airlock.gate import Gate
from tests.gate.support import FakeCheckpoint, gate_files

ORDER = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
REFUND = {
    "type": "object",
    "properties": {"order": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["order", "amount"],
}


@dataclass
class Payments:
    """The service the tools act on, counting its own calls."""

    lookups: int = 0
    refunds: list[tuple[str, int, str]] = field(default_factory=list)
    refunded: dict[str, int] = field(default_factory=dict)

    def tools(self) -> list[Tool]:
        def find_order(order: str) -> dict[str, Any]:
            self.lookups += 1
            return {"order": order, "total": 12500}

        def refund(order: str, amount: int, *, idempotency_key: str) -> str:
            self.refunds.append((order, amount, idempotency_key))
            self.refunded[order] = self.refunded.get(order, 0) + amount
            return f"re_{order}"

        return [
            Tool("find_order", "Look an order up", find_order, ORDER),
            Tool(
                "refund",
                "Refund an order, in cents",
                refund,
                REFUND,
                risk=Risk.SENSITIVE,
                target=lambda order, amount: order,
                effect_key=lambda order, amount: f"refund:{order}",
                premises=lambda order, amount: {"refunded": self.refunded.get(order, 0)},
            ),
        ]


@dataclass
class World:
    """A checkpoint, a service, and a way to start the agent's process again."""

    tmp: Path
    fake: FakeCheckpoint
    payments: Payments
    gates: list[Gate] = field(default_factory=list)

    def process(
        self, script: Sequence[Any] = (), provider: Provider | None = None, **options: Any
    ) -> tuple[Agent, Any]:
        """A new "process": a new Gate and Agent over the same ledger and run files, with
        ``provider`` or a :class:`ScriptedProvider` of ``script``."""
        config = gate_files(
            self.tmp,
            checkpoint_url="http://checkpoint.test",
            ledger_url=f"sqlite:///{self.tmp / 'gate.db'}",
        )
        gate = Gate(config, http=self.fake.client())
        self.fake.receipt_keys = gate.receipt_keys
        self.gates.append(gate)
        provider = provider or ScriptedProvider(script)
        agent = Agent(
            provider, self.payments.tools(), gate=gate, state=self.tmp / "runs.db", **options
        )
        return agent, provider
