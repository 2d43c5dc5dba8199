"""``McpTools``: the tool loop over a real MCP server subprocess (FastMCP) behind a real
``airlock mcp proxy`` and the fake checkpoint. A pending call pauses the run, a new
process resumes it, and the server's counter file says how often a refund ran."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from airlock.agents import Agent, Call, Done, Message, Paused, Reply, ScriptedProvider
from airlock.mcp import McpTools
from tests.gate.support import FakeCheckpoint, gate_files

SERVER = str(Path(__file__).with_name("refunds_server.py"))

CONFIG = """
wait = 0
results = "{results}"
approval_url = "https://airlock.test/proposals/{{proposal_id}}"

[tools.refund]
effect_key = "refund:{{order}}"
target = "order"
risk = "high"
premise = {{ tool = "refunded_total", arguments = {{ order = "order" }}, keep = ["refunded"] }}
lookup = {{ tool = "find_refund", argument = "effect_key" }}
"""


def final(messages: Sequence[Message]) -> Reply:
    """The model's last turn: it repeats the last tool result, and whether it was one."""
    last = messages[-1]
    return Reply(f"{'error' if last.is_error else 'ok'}: {last.text}")


Step = Reply | Callable[[Sequence[Message]], Reply]


@dataclass
class World:
    fake: FakeCheckpoint
    tmp: Path
    env: dict[str, str]
    mcp: McpTools | None = None

    @property
    def counter(self) -> Path:
        return self.tmp / "counter"

    def counted(self) -> list[str]:
        return self.counter.read_text().split() if self.counter.exists() else []

    def tools(self, names: Sequence[str] | None = None) -> McpTools:
        """A new session: a new proxy process in front of a new server process."""
        config = self.tmp / "airlock-mcp.toml"
        proxy = [sys.executable, "-m", "airlock.cli", "mcp", "proxy", "--config", str(config)]
        server = [sys.executable, SERVER, str(self.counter)]
        return McpTools([*proxy, "--", *server], env=self.env, names=names)

    def agent(self, mcp: McpTools | None = None, *, script: Sequence[Step]) -> Agent:
        """An agent over ``mcp``, or over the session the module's tests share."""
        session = mcp or self.mcp
        assert session is not None
        return Agent(ScriptedProvider(script), session.tools, state=self.tmp / "runs.db")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One fake checkpoint, and one session to the proxy that the tests share (each
    session is two Python processes); each test refunds its own order."""
    tmp = tmp_path_factory.mktemp("mcp-tools")
    fake = FakeCheckpoint()
    with fake.serve() as url:
        config = gate_files(tmp, checkpoint_url=url, ledger_url=f"sqlite:///{tmp / 'gate.db'}")
        (tmp / "airlock-mcp.toml").write_text(CONFIG.format(results=tmp / "results.db"))
        env = {
            "PATH": os.environ.get("PATH", ""),
            "AIRLOCK_GATE_CHECKPOINT_URL": url,
            "AIRLOCK_GATE_TOKEN": config.token,
            "AIRLOCK_GATE_KEYS": str(config.keys),
            "AIRLOCK_GATE_AUDIENCE": config.audience,
            "AIRLOCK_GATE_LEDGER_URL": config.ledger_url,
            "AIRLOCK_GATE_RECEIPT_KEY": str(config.receipt_key),
        }
        world = World(fake, tmp, env)
        with world.tools() as world.mcp:
            yield world


def _refund(order: str) -> tuple[Step, ...]:
    return (Reply("", (Call("c1", "refund", {"order": order, "amount": 12500}),)), final)


def _proposal(world: World, order: str) -> str:
    (found,) = [i for i, r in world.fake.proposals.items() if r.call.target == order]
    return found


def test_a_pending_call_pauses_the_run_and_a_new_process_gets_the_one_real_result(
    world: World,
) -> None:
    paused = world.agent(script=_refund("order-1")).run("refund order-1")
    assert isinstance(paused, Paused)
    assert paused.proposal_id == _proposal(world, "order-1")
    assert paused.url == f"https://airlock.test/proposals/{paused.proposal_id}"
    # Not decided yet: calling again pauses on the same proposal, nothing runs.
    again = world.agent(script=_refund("order-1")).resume(paused.run_id)
    assert isinstance(again, Paused) and again.proposal_id == paused.proposal_id
    assert world.counted() == []

    world.fake.approve(paused.proposal_id)
    with world.tools(names=["refund"]) as fresh:  # a restart: new proxy, new server
        assert [t.name for t in fresh.tools] == ["refund"]
        done = world.agent(fresh, script=_refund("order-1")).resume(paused.run_id)
    assert done == Done(paused.run_id, "ok: refunded 12500 on order-1")
    assert world.counted() == ["order-1:12500"]

    # The session is gone: the call is unanswered, not failed; resume calls again.
    lost = world.agent(fresh, script=_refund("order-9")).run("refund order-9")
    assert isinstance(lost, Paused) and lost.proposal_id is None
    assert [r.call.target for r in world.fake.proposals.values()] == ["order-1"]


def test_a_rejection_reaches_the_model_as_an_error_result(world: World) -> None:
    paused = world.agent(script=_refund("order-2")).run("refund order-2")
    assert isinstance(paused, Paused) and paused.proposal_id is not None
    world.fake.reject(paused.proposal_id, "wrong_target", "not this order", "bob")
    done = world.agent(script=_refund("order-2")).resume(paused.run_id)
    assert isinstance(done, Done)
    assert done.text.startswith("error: E_REJECTED: refund was rejected by bob: wrong_target")
    assert "not this order" in done.text
    assert "order-2:12500" not in world.counted()


def test_an_error_of_the_server_is_a_result_the_model_reads(world: World) -> None:
    broken = (Reply("", (Call("c1", "broken_premise", {"order": "o"}),)), final)
    done = world.agent(script=broken).run("read it")
    assert isinstance(done, Done)
    assert done.text.startswith("error: ") and "the ledger is down" in done.text
