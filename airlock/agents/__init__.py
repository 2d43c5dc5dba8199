"""The tool loop: an LLM agent whose sensitive tools wait for a person (docs/agents.md).

::

    agent = Agent(
        OpenAIChat(model="gpt-4o", api_key=key, base_url="https://api.openai.com/v1"),
        [Tool("find_order", "Look an order up", find_order, {...}),
         Tool("refund", "Refund an order", refund, {...}, risk=Risk.SENSITIVE,
              target=lambda order, amount: order,
              effect_key=lambda order, amount: f"refund:{order}")],
        gate=Gate.from_env(),
        state=".airlock/agent-runs.db",
    )
    result = agent.run("Refund order 881")  # Paused(...) or Done(...)
    ...                                     # a person approves, edits or rejects
    result = agent.resume(result.run_id)    # any process, after a restart too

Why here and not in ``examples/``: the loop is what a team without its own loop installs,
so it ships with ``pip install airlock`` beside the gate it stands on, is typed strictly,
and the demo and the MCP work import it. It is kernel-side: it imports the kernel,
:mod:`airlock.gate`, ``httpx`` and the standard library (``sqlite3`` for runs) only —
never a web framework, a CLI, a service or a model vendor's SDK (import-linter checks
it). It holds no key but the provider's API key it is given.
"""

from ._agent import Agent
from ._model import Call, Done, Message, Paused, Reply, Risk, Tool
from ._providers import AnthropicMessages, OpenAIChat, Provider, ScriptedProvider
from ._store import Run
from .errors import (
    Error,
    Fenced,
    NotResumable,
    ProviderError,
    RunNotFound,
    StepLimit,
    ToolError,
)

__all__ = [
    "Agent",
    "AnthropicMessages",
    "Call",
    "Done",
    "Error",
    "Fenced",
    "Message",
    "NotResumable",
    "OpenAIChat",
    "Paused",
    "Provider",
    "ProviderError",
    "Reply",
    "Risk",
    "Run",
    "RunNotFound",
    "ScriptedProvider",
    "StepLimit",
    "Tool",
    "ToolError",
]
