"""The demo: Airlock's tool loop refunds an order through ``airlock mcp proxy``, and waits
for a person to approve the refund in the web app.

``python -m examples.helpdesk.demo "refund order 881 for 25.00"`` (with ``make up``
running) sets the gate up if it is not yet (``setup.py``), starts the MCP server behind
the proxy, and runs the loop with a scripted model (no API key, no network): it looks
the order up, then calls ``refund``. The proxy turns that call into a proposal and
answers "pending", so the run pauses; the demo prints the proposal's page in the web app
and calls again every ``--every`` seconds (``Agent.resume``) until a person decided,
then prints the model's answer and the desk's state. Ctrl-C stops between two steps;
the run is kept in ``.airlock/helpdesk-runs.db`` and ``--resume RUN_ID`` continues it.

Exit codes: 0 the model answered (refunded, or told why not), 3 still waiting after
``--timeout`` seconds, 130 stopped by Ctrl-C, 2 usage, 1 error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from airlock.agents import Agent, Call, Done, Message, Paused, Reply, ScriptedProvider
from airlock.agents import Error as AgentError
from airlock.mcp import McpTools

from . import desk
from .setup import ENV_NAME, settings, setup

CONFIG = Path(__file__).with_name("airlock-mcp.toml")
SYSTEM = "You are a help desk agent. Look an order up before you refund it; amounts in cents."

_ORDER = re.compile(r"\border[\s#-]*(\d+)\b", re.IGNORECASE)
_AMOUNT = re.compile(r"\bfor\s+\$?(\d{1,7})(?:\.(\d{1,2}))?\b", re.IGNORECASE)


def plan(task: str) -> tuple[str, int] | None:
    """The order and the amount in cents a task asks for: ``"refund order 881 for 25.00"``
    → ``("order-881", 2500)``; None if it names either not."""
    order, amount = _ORDER.search(task), _AMOUNT.search(task)
    if order is None or amount is None:
        return None
    cents = int(amount.group(1)) * 100 + int((amount.group(2) or "0").ljust(2, "0"))
    return f"order-{order.group(1)}", cents


# -- the scripted model: three turns, each a function of the conversation ----------------


def _look_up(messages: Sequence[Message]) -> Reply:
    planned = plan(messages[0].text)
    if planned is None:
        return Reply("Tell me an order and an amount, as in: refund order 881 for 25.00")
    return Reply(
        f"Looking {planned[0]} up.", (Call("call-1", "find_order", {"order": planned[0]}),)
    )


def _refund(messages: Sequence[Message]) -> Reply:
    order, amount = plan(messages[0].text) or ("", 0)
    found = messages[-1]
    try:
        paid = json.loads(found.text)["paid"]
    except (ValueError, KeyError, TypeError):
        return Reply(f"I could not look {order} up: {found.text}")
    return Reply(
        f"{order} was paid {desk.money(paid)}; refunding {desk.money(amount)}.",
        (Call("call-2", "refund", {"order": order, "amount": amount}),),
    )


def _last_json(text: str) -> dict[str, Any]:
    """The JSON object that ends ``text``: the desk's answer, after the line the proxy
    puts first when a person edited the call. ValueError if there is none."""
    lines = text.splitlines()
    for start in range(len(lines)):
        try:
            value = json.loads("\n".join(lines[start:]))
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("no JSON object")


def _answer(messages: Sequence[Message]) -> Reply:
    order, asked = plan(messages[0].text) or ("", 0)
    result = messages[-1]
    if result.is_error:
        return Reply(f"The refund on {order} did not happen: {result.text}")
    try:
        issued = _last_json(result.text)
        text = (
            f"Refunded {desk.money(issued['amount'])} on {order} ({issued['refund_id']}); "
            f"{desk.money(issued['refunded'])} of {desk.money(issued['paid'])} refunded so far."
        )
    except (ValueError, KeyError, TypeError):
        return Reply(f"The desk answered: {result.text}")
    if issued["amount"] != asked:
        text += f" The approver changed the amount from {desk.money(asked)}."
    return Reply(text)


SCRIPT = (_look_up, _refund, _answer)


# -- the one command -----------------------------------------------------------------------


class _Stop:
    """Ctrl-C (or SIGTERM) asks to stop between two steps of the run; a second one stops
    at once."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.asked.is_set():
            raise KeyboardInterrupt
        self.asked.set()
        print("stopping after this step (Ctrl-C again: now)", file=sys.stderr, flush=True)


def _say(text: str) -> None:
    print(text, flush=True)


def _wait(
    agent: Agent, result: Paused | Done, webapp: str, *, every: float, timeout: float, stop: _Stop
) -> Paused | Done:
    """Resume every ``every`` seconds until the run is done, ``timeout`` passed or Ctrl-C."""
    shown: str | None = None
    deadline = time.monotonic() + timeout
    while isinstance(result, Paused):
        if result.proposal_id is None:
            _say("the checkpoint or the MCP server did not answer; trying again")
        elif result.proposal_id != shown:
            shown = result.proposal_id
            _say(f"run {result.run_id}: {result.tool} awaits a person's decision")
            _say(f"  approve (or edit the amount, then approve): {webapp}/proposals/{shown}")
            _say(f"  checking every {every:g} s; Ctrl-C stops, --resume {result.run_id} goes on")
        if time.monotonic() >= deadline or stop.asked.wait(every):
            return result
        result = agent.resume(result.run_id)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.helpdesk.demo", description=__doc__)
    parser.add_argument("task", nargs="?", help='e.g. "refund order 881 for 25.00"')
    parser.add_argument("--resume", metavar="RUN_ID", help="continue a run instead")
    parser.add_argument("--home", type=Path, default=Path(".airlock"), help="up's state directory")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between checks")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait in all")
    args = parser.parse_args(argv)
    if (args.task is None) == (args.resume is None):
        parser.error("give a task or --resume RUN_ID")
    home: Path = args.home.resolve()
    try:
        webapp = json.loads((home / "up.json").read_text())["webapp_url"]
        gate = settings(home)
        if not gate:
            gate = setup(home)
            _say(f"set the proxy's gate up for make up's stack: {home / ENV_NAME}")
    except (OSError, ValueError, KeyError, subprocess.CalledProcessError) as exc:
        print(f"error: is `make up` running on {home}? {exc}", file=sys.stderr)
        return 1
    db = home / "helpdesk.db"
    proxy = [sys.executable, "-m", "airlock.cli", "mcp", "proxy", "--config", str(CONFIG), "--"]
    server = [sys.executable, "-m", "examples.helpdesk.server", "--db", str(db)]
    stop = _Stop()
    try:
        with McpTools([*proxy, *server], env={**os.environ, **gate}) as mcp:
            agent = Agent(
                ScriptedProvider(SCRIPT),
                [t for t in mcp.tools if t.name in ("find_order", "refund")],
                state=home / "helpdesk-runs.db",
                system=SYSTEM,
            )
            result = agent.resume(args.resume) if args.resume else agent.run(args.task)
            result = _wait(agent, result, webapp, every=args.every, timeout=args.timeout, stop=stop)
    except AgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if isinstance(result, Paused):
        _say(
            f"still waiting; go on with: python -m examples.helpdesk.demo --resume {result.run_id}"
        )
        return 130 if stop.asked.is_set() else 3
    _say(f"model: {result.text}")
    _say("desk:")
    _say(desk.describe(desk.connect(db)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
