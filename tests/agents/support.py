"""The tests' world: a payments service whose tools count their calls, the fake
checkpoint, and new "processes" (a Gate and an Agent) over the same SQLite files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from airlock.agents import Agent, Call, Message, Provider, Reply, Risk, ScriptedProvider, Tool
from airlock.gate import Gate
from tests.gate.support import FakeCheckpoint, gate_files

ORDER = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
REFUND = {
    "type": "object",
    "properties": {"order": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["order", "amount"],
}


def final(messages: Sequence[Message]) -> Reply:
    """The model's last turn: it repeats the last tool result."""
    return Reply(f"final: {messages[-1].text}")


SCRIPT = (
    Reply("Looking it up.", (Call("c1", "find_order", {"order": "order-881"}),)),
    Reply("", (Call("c2", "refund", {"order": "order-881", "amount": 12500}),)),
    final,
)


@dataclass
class Payments:
    """The service the tools act on, counting its own calls (and, with ``counter``, each
    refund's effect key as a line of that file, for a test in another process)."""

    lookups: int = 0
    refunds: list[tuple[str, int, str]] = field(default_factory=list)
    refunded: dict[str, int] = field(default_factory=dict)
    counter: Path | None = None

    def tools(self) -> list[Tool]:
        def find_order(order: str) -> dict[str, Any]:
            self.lookups += 1
            return {"order": order, "total": 12500}

        def refund(order: str, amount: int, *, idempotency_key: str) -> str:
            self.refunds.append((order, amount, idempotency_key))
            if self.counter is not None:
                with self.counter.open("a") as out:
                    out.write(idempotency_key + "\n")
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
    #: The checkpoint does not answer while this is set.
    down: bool = False

    def client(self) -> httpx.Client:
        """The fake checkpoint in-process, unreachable while :attr:`down`."""

        def respond(request: httpx.Request) -> httpx.Response:
            if self.down:
                raise httpx.ConnectError("checkpoint down", request=request)
            status, answer = self.fake.handle(
                request.method,
                request.url.path,
                request.headers.get("authorization", ""),
                request.read(),
            )
            return httpx.Response(status, content=json.dumps(answer).encode())

        return httpx.Client(
            base_url="http://checkpoint.test", transport=httpx.MockTransport(respond)
        )

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
        gate = Gate(config, http=self.client())
        self.fake.receipt_keys = gate.receipt_keys
        self.gates.append(gate)
        provider = provider or ScriptedProvider(script)
        agent = Agent(
            provider, self.payments.tools(), gate=gate, state=self.tmp / "runs.db", **options
        )
        return agent, provider
