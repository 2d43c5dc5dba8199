"""The loop: a scripted run pauses at a sensitive tool, survives a restart (a new Gate
and a new Agent over the same SQLite files), resumes once a person decided, and the
model reads a rejection or a refusal as a tool result.

The checkpoint is the gate tests' fake (tests/gate/support.py); the refund function's
own counter, not the agent's word, says how often it ran.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import pytest

from airlock.agents import (
    Agent,
    Call,
    Done,
    Fenced,
    Message,
    NotResumable,
    Paused,
    ProviderError,
    Reply,
    ScriptedProvider,
    StepLimit,
    Tool,
    ToolError,
)
from airlock.agents._store import RunStore

from .support import SCRIPT, Payments, World, final


def _paused(world: World) -> Paused:
    agent, _ = world.process(SCRIPT)
    paused = agent.run("Refund order 881 in full")
    assert isinstance(paused, Paused)
    return paused


def test_a_run_pauses_at_a_sensitive_tool_and_resumes_after_a_restart_and_approve(
    world: World,
) -> None:
    paused = _paused(world)
    assert (paused.tool, paused.call_id, paused.proposal_id) == ("refund", "c2", world.fake.only())
    assert world.payments.refunds == []
    assert world.payments.lookups == 1

    # No decision yet: a new process resumes, and pauses at the same proposal.
    agent, _ = world.process(SCRIPT)
    again = agent.resume(paused.run_id)
    assert isinstance(again, Paused)
    assert again.proposal_id == paused.proposal_id
    assert world.payments.refunds == []

    world.fake.approve(paused.proposal_id)
    agent, _ = world.process(SCRIPT)
    done = agent.resume(paused.run_id)
    assert done == Done(paused.run_id, "final: re_order-881")
    assert world.payments.refunds == [("order-881", 12500, "refund:order-881")]
    assert world.payments.lookups == 1  # the safe tool's saved result was not recomputed
    assert agent.load(paused.run_id).status == "done"


def test_a_done_run_is_not_resumed_and_the_tool_does_not_run_twice(world: World) -> None:
    paused = _paused(world)
    world.fake.approve(paused.proposal_id)
    agent, _ = world.process(SCRIPT)
    assert isinstance(agent.resume(paused.run_id), Done)
    with pytest.raises(NotResumable):
        world.process(SCRIPT)[0].resume(paused.run_id)
    assert len(world.payments.refunds) == 1


def test_after_reject_the_models_next_message_reads_the_reason(world: World) -> None:
    paused = _paused(world)
    assert paused.proposal_id is not None
    world.fake.reject(paused.proposal_id, "wrong_amount", "refund 50.00 only", "bob")
    agent, provider = world.process(SCRIPT)
    done = agent.resume(paused.run_id)
    assert isinstance(done, Done)
    result = provider.seen[-1][-1]
    assert (result.role, result.call_id, result.is_error) == ("tool", "c2", True)
    assert "E_REJECTED" in result.text
    assert "wrong_amount" in result.text
    assert "refund 50.00 only" in result.text
    assert "bob" in result.text
    assert world.payments.refunds == []


def test_after_an_edit_the_tool_gets_the_edited_arguments_and_the_model_is_told(
    world: World,
) -> None:
    paused = _paused(world)
    assert paused.proposal_id is not None
    edited = world.fake.edit(paused.proposal_id, amount=5000)
    # A restart before the decision pauses at the edited proposal, not the withdrawn one.
    agent, _ = world.process(SCRIPT)
    again = agent.resume(paused.run_id)
    assert isinstance(again, Paused)
    assert again.proposal_id == edited
    world.fake.approve(edited)
    agent, provider = world.process(SCRIPT)
    done = agent.resume(paused.run_id)
    assert isinstance(done, Done)
    assert world.payments.refunds == [("order-881", 5000, "refund:order-881")]
    result = provider.seen[-1][-1]
    assert (result.role, result.call_id, result.is_error) == ("tool", "c2", False)
    assert result.text == (
        "A person edited this call before approving it (amount was 12500, now 5000)."
        " Result: re_order-881"
    )


def test_a_call_approved_unedited_reads_no_edit_note(world: World) -> None:
    paused = _paused(world)
    assert paused.proposal_id is not None
    world.fake.approve(paused.proposal_id)
    agent, provider = world.process(SCRIPT)
    agent.resume(paused.run_id)
    assert provider.seen[-1][-1].text == "re_order-881"


def test_a_premise_moved_since_approval_is_refused_and_the_model_reads_what_changed(
    world: World,
) -> None:
    paused = _paused(world)
    assert paused.proposal_id is not None
    world.fake.approve(paused.proposal_id)
    world.payments.refunded["order-881"] = 500  # refunded by hand meanwhile
    agent, provider = world.process(SCRIPT)
    assert isinstance(agent.resume(paused.run_id), Done)
    result = provider.seen[-1][-1]
    assert result.is_error
    assert result.text.startswith("E_PREMISES: ")
    assert "refunded was 0, now 500" in result.text
    assert world.payments.refunds == []


def test_the_model_cannot_pass_the_idempotency_key(world: World) -> None:
    forged = Call("c9", "refund", {"order": "o-1", "amount": 1, "idempotency_key": "refund:x"})
    agent, provider = world.process([Reply("", (forged,)), final])
    done = agent.run("refund")
    assert done == Done(done.run_id, f"final: {provider.seen[-1][-1].text}")
    assert provider.seen[-1][-1].text.startswith("E_ARGUMENTS: ")
    assert world.fake.proposals == {}


def test_unknown_tools_and_wrong_arguments_are_results_not_crashes(world: World) -> None:
    calls = (Call("c1", "drop_tables", {}), Call("c2", "find_order", {"id": 3}))
    agent, provider = world.process([Reply("", calls), final])
    assert isinstance(agent.run("go"), Done)
    results = [m for m in provider.seen[-1] if m.role == "tool"]
    assert [r.text.split(":")[0] for r in results] == ["E_UNKNOWN_TOOL", "E_ARGUMENTS"]
    assert world.payments.lookups == 0


def test_a_tool_that_words_its_own_failure_is_read_whole_as_an_error(tmp_path: Path) -> None:
    said = "E_REJECTED: refund was rejected by alice: other " + "x" * 400

    def refund(order: str) -> str:
        raise ToolError(said)

    provider = ScriptedProvider([Reply("", (Call("c1", "refund", {"order": "o"}),)), final])
    agent = Agent(provider, [Tool("refund", "", refund)], state=tmp_path / "runs.db")
    assert isinstance(agent.run("go"), Done)
    (result,) = [m for m in provider.seen[-1] if m.role == "tool"]
    assert (result.text, result.is_error) == (said, True)


def test_a_run_that_never_ends_stops_at_max_steps(world: World) -> None:
    loop = Reply("", (Call("c", "find_order", {"order": "o"}),))
    agent, _ = world.process([loop] * 5, max_steps=3)
    with pytest.raises(StepLimit):
        agent.run("spin")
    assert world.payments.lookups == 3


def test_a_provider_failure_leaves_the_run_resumable(world: World) -> None:
    agent, _ = world.process(SCRIPT[:1])  # the script ends before the model's 2nd turn
    with pytest.raises(ProviderError):
        agent.run("Refund order 881 in full")
    (run_id,) = _run_ids(world.tmp / "runs.db")
    assert agent.load(run_id).status == "paused"
    agent, _ = world.process(SCRIPT)
    assert isinstance(agent.resume(run_id), Paused)
    assert world.payments.lookups == 1


def test_a_sensitive_tool_without_a_gate_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="E_CONFIG"):
        Agent(ScriptedProvider(SCRIPT), Payments().tools(), state=tmp_path / "runs.db")


def test_gate_options_on_a_safe_tool_are_refused() -> None:
    with pytest.raises(ValueError, match="E_CONFIG"):
        Tool("find", "", lambda: None, target="x")


def test_a_run_held_by_a_live_process_is_not_taken(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    run = store.create([Message("user", "t")], now=100, lease=60)
    with pytest.raises(NotResumable):
        store.claim(run.id, now=120, lease=60)


def test_a_process_whose_run_was_taken_over_saves_nothing(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.db")
    stale = store.create([Message("user", "t")], now=100, lease=60)
    taken = store.claim(stale.id, now=200, lease=60)  # the first process's lease ran out
    with pytest.raises(Fenced):
        store.save(
            stale,
            [Message("user", "t"), Message("assistant", "x")],
            status="done",
            now=201,
            lease=60,
        )
    assert store.load(stale.id).messages == taken.messages


def _run_ids(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM agent_runs")]


def test_while_the_checkpoint_is_down_the_run_pauses_without_a_proposal(world: World) -> None:
    world.down = True
    agent, _ = world.process(SCRIPT)
    paused = agent.run("Refund order 881 in full")
    assert isinstance(paused, Paused)
    assert (paused.tool, paused.proposal_id) == ("refund", None)
    assert world.fake.proposals == {}

    world.down = False
    agent, _ = world.process(SCRIPT)
    again = agent.resume(paused.run_id)
    assert isinstance(again, Paused)
    assert again.proposal_id == world.fake.only()
    assert world.payments.refunds == []


def _stop(messages: Sequence[Message]) -> Reply:
    raise SystemExit(137)  # the process stops while the model thinks


def test_a_run_whose_process_stopped_is_taken_over_only_after_its_lease(world: World) -> None:
    clock = [1_000.0]
    agent, _ = world.process([SCRIPT[0], _stop], lease_seconds=60, now=lambda: clock[0])
    with pytest.raises(SystemExit):
        agent.run("Refund order 881 in full")
    (run_id,) = _run_ids(world.tmp / "runs.db")
    assert agent.load(run_id).status == "running"

    clock[0] += 30
    with pytest.raises(NotResumable):
        world.process(SCRIPT, lease_seconds=60, now=lambda: clock[0])[0].resume(run_id)

    clock[0] += 31
    agent, _ = world.process(SCRIPT, lease_seconds=60, now=lambda: clock[0])
    paused = agent.resume(run_id)
    assert isinstance(paused, Paused)
    assert world.payments.lookups == 1  # saved before the stop: not called again
