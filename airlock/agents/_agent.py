"""The loop: ask the model, run the tools it calls, pause at a sensitive one until a
person decides, and keep every step in the run store.

One turn, in order::

    (1) answer each call of the model's last turn that has no result yet, in order:
        an unknown tool or arguments its function does not take  → an error result
        a safe tool                    → called; its value (or error) is the result
        a sensitive tool               → called through the gate:
            Pending                    → the run is saved paused; run()/resume() return
                                         Paused (resume calls the tool again: the gate
                                         picks the same proposal up by its effect key)
            approved as edited         → the function gets the person's arguments; the
                                         result tells the model what was changed
            Rejected / Refused /
            EffectKeyConflict / InDoubt → an error result naming the code, the reason
                                         and the note or what changed; never a crash
            Unavailable                → paused with no proposal; resume retries
        a tool that raised ToolError   → an error result of exactly its text
        (a tool of any risk may raise the gate's Pending or Unavailable itself: the MCP
        tools do when the proxy answers "pending" or cannot be reached)
        each result is saved before the next call
    (2) ask the provider for the next turn and save it; no calls → done

A tool call that ran is never called again by a resume: its result was saved first, or,
for a sensitive tool, the gate's ledger refuses the second use (``E_REPLAY``). A safe
tool interrupted between its call and the save may run again: safe tools have no effect
worth a person's approval.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from airlock import gate as gates

from ._model import Call, Done, Message, Paused, Risk, Tool
from ._providers import Provider
from ._store import Run, RunStore
from .errors import ProviderError, StepLimit, ToolError

__all__ = ["Agent"]

#: The most of a tool's error message the model reads.
_ERROR_CHARS = 300


class _Wait:
    """A sensitive call awaits a decision (or the checkpoint)."""

    def __init__(self, call: Call, proposal_id: str | None, url: str | None) -> None:
        self.call = call
        self.proposal_id = proposal_id
        self.url = url


class Agent:
    """An LLM tool loop whose sensitive tools wait for a person (module docstring).

    Args:
        provider: the model (:class:`ScriptedProvider`, :class:`OpenAIChat`,
            :class:`AnthropicMessages` or your own :class:`Provider`).
        tools: the tools the model may call; names unique.
        state: the SQLite file the runs are kept in (created if absent).
        gate: the gate sensitive tools go through; required if any tool is sensitive.
            The agent guards them on it (``wait=0``), so a gate serves one agent.
        system: the system prompt, if any.
        max_steps: the most model turns a run takes before :class:`StepLimit`.
        lease_seconds: how long a process holds a running run before another may take
            it over (one that stopped mid-run).
        now: the clock, Unix seconds.

    Raises:
        ValueError: duplicate tool names, or a sensitive tool without a gate.
    """

    def __init__(
        self,
        provider: Provider,
        tools: Sequence[Tool],
        *,
        state: str | Path,
        gate: gates.Gate | None = None,
        system: str | None = None,
        max_steps: int = 20,
        lease_seconds: int = 300,
        now: Callable[[], float] = time.time,
    ) -> None:
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError("E_CONFIG: two tools have the same name")
        self._provider = provider
        self._tools = {t.name: t for t in tools}
        self._store = RunStore(state)
        self._system = system
        self._max_steps = max_steps
        self._lease = lease_seconds
        self._now = now
        self._calls: dict[str, Callable[..., Any]] = {}
        #: The arguments the last sensitive call ran with (a person may have edited them).
        self._ran_with: dict[str, Any] | None = None
        for tool in tools:
            if tool.risk is Risk.SENSITIVE:
                if gate is None or tool.target is None or tool.effect_key is None:
                    raise ValueError(f"E_CONFIG: sensitive tool {tool.name} needs a gate")
                self._calls[tool.name] = gate.guard(
                    risk=tool.level,
                    target=tool.target,
                    effect_key=tool.effect_key,
                    premises=tool.premises,
                    lookup=tool.lookup,
                    summary=tool.summary,
                    tool=tool.name,
                    wait=0.0,
                    editable=tool.editable,
                )(self._recording(tool.fn))
            else:
                self._calls[tool.name] = tool.fn

    def _recording(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, noting the arguments each call receives in ``_ran_with``."""
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            ran: dict[str, Any] = {}
            for name, value in bound.arguments.items():
                if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                    ran.update(value)
                elif name != "idempotency_key":
                    ran[name] = value
            self._ran_with = ran
            return fn(*args, **kwargs)

        return call

    def run(self, task: str) -> Paused | Done:
        """Start a run on ``task``; return when it is done or paused.

        Raises :class:`StepLimit`, :class:`ProviderError` (the run is left paused:
        ``resume`` asks the model again) or an error of the gate not meant for the model.
        """
        run = self._store.create([Message("user", task)], now=self._clock(), lease=self._lease)
        return self._loop(run)

    def resume(self, run_id: str) -> Paused | Done:
        """Continue a paused run (after a person decided), from this or any process.

        Raises :class:`RunNotFound`, :class:`NotResumable` (done, failed, or held by a
        live process), and what :meth:`run` raises.
        """
        return self._loop(self._store.claim(run_id, now=self._clock(), lease=self._lease))

    def load(self, run_id: str) -> Run:
        """The run as stored: status, conversation, the call it paused at."""
        return self._store.load(run_id)

    def _clock(self) -> int:
        return int(self._now())

    def _save(self, run: Run, messages: list[Message], status: Any, **fields: Any) -> Run:
        return self._store.save(
            run, messages, status=status, now=self._clock(), lease=self._lease, **fields
        )

    def _loop(self, run: Run) -> Paused | Done:
        messages = list(run.messages)
        while True:
            # (1) the last turn's calls that have no result yet
            for call in _unanswered(messages):
                outcome = self._call(call)
                if isinstance(outcome, _Wait):
                    self._save(
                        run,
                        messages,
                        "paused",
                        pending={
                            "call_id": call.id,
                            "tool": call.name,
                            "proposal_id": outcome.proposal_id,
                            "url": outcome.url,
                        },
                    )
                    return Paused(run.id, call.name, call.id, outcome.proposal_id, outcome.url)
                messages.append(outcome)
                run = self._save(run, messages, "running")
            # (2) the model's next turn
            if sum(1 for m in messages if m.role == "assistant") >= self._max_steps:
                self._save(run, messages, "failed")
                raise StepLimit(f"run {run.id} reached {self._max_steps} turns")
            try:
                reply = self._provider.complete(
                    messages, list(self._tools.values()), system=self._system
                )
            except ProviderError:
                self._save(run, messages, "paused")
                raise
            messages.append(Message("assistant", reply.text, reply.calls))
            if not reply.calls:
                self._save(run, messages, "done", result=reply.text)
                return Done(run.id, reply.text)
            run = self._save(run, messages, "running")

    def _call(self, call: Call) -> Message | _Wait:
        """One call's result message, or :class:`_Wait` for a pending decision."""

        def result(text: str, *, error: bool = False) -> Message:
            return Message("tool", text, call_id=call.id, is_error=error)

        tool = self._tools.get(call.name)
        if tool is None:
            return result(f"E_UNKNOWN_TOOL: there is no tool {call.name}", error=True)
        if not _takes(tool, call.arguments):
            return result(f"E_ARGUMENTS: {call.name} does not take these arguments", error=True)
        self._ran_with = None
        try:
            value = self._calls[call.name](**call.arguments)
        except gates.Pending as p:
            return _Wait(call, p.proposal_id, p.url)
        except gates.Unavailable:
            return _Wait(call, None, None)
        except gates.Rejected as r:
            return result(
                f"E_REJECTED: {r.by} rejected this call: {r.reason_code}: {r.note}", error=True
            )
        except gates.Refused as r:
            changed = "".join(f"; {c.field} was {c.was!r}, now {c.now!r}" for c in r.changes)
            return result(f"{r.code}: {r.detail}{changed}", error=True)
        except gates.EffectKeyConflict as e:
            return result(f"E_EFFECT_KEY: {e.detail}", error=True)
        except gates.InDoubt:
            return result(
                "E_IN_DOUBT: the call may have happened; a person resolves it", error=True
            )
        except ToolError as e:
            return result(e.text, error=True)
        except gates.Error:
            raise  # ConfigError: the gate is unusable, not something the model can fix
        except Exception as exc:
            text = f"E_TOOL_FAILED: {type(exc).__name__}: {exc}"[:_ERROR_CHARS]
            return result(text, error=True)
        edited = _edit_note(call.arguments, self._ran_with)
        if isinstance(value, str):
            return result(edited + value)
        try:
            return result(edited + json.dumps(value))
        except (TypeError, ValueError):
            return result(
                f"E_TOOL_FAILED: {call.name} returned a {type(value).__name__}", error=True
            )


def _edit_note(asked: dict[str, Any], ran: dict[str, Any] | None) -> str:
    """A line telling the model a person edited its call, and how; "" when nobody did."""
    edits = () if ran is None else gates.changed(asked, ran)
    if not edits:
        return ""
    what = ", ".join(f"{c.field} was {json.dumps(c.was)}, now {json.dumps(c.now)}" for c in edits)
    return f"A person edited this call before approving it ({what}). Result: "


def _unanswered(messages: Sequence[Message]) -> list[Call]:
    """The calls of the last assistant turn with no tool message answering them."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            answered = {m.call_id for m in messages[i + 1 :] if m.role == "tool"}
            return [c for c in messages[i].calls if c.id not in answered]
    return []


def _takes(tool: Tool, arguments: dict[str, Any]) -> bool:
    """Does the tool's function take these keyword arguments? ``idempotency_key`` is the
    gate's to give, never the model's."""
    if "idempotency_key" in arguments and tool.risk is Risk.SENSITIVE:
        return False
    params = inspect.signature(tool.fn).parameters
    free = inspect.Signature(
        [
            p
            for name, p in params.items()
            if not (tool.risk is Risk.SENSITIVE and name == "idempotency_key")
        ]
    )
    try:
        free.bind(**arguments)
    except TypeError:
        return False
    return True
