"""``airlock mcp proxy`` against a real MCP server subprocess (FastMCP) and the fake
checkpoint on 127.0.0.1: the server's counter file, not the proxy, says how often a
refund ran."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from airlock.ledger import ledger
from airlock.store import make_engine
from tests.gate.support import FakeCheckpoint, gate_files
from tests.support.polling import wait_for

SERVER = str(Path(__file__).with_name("refunds_server.py"))

CONFIG = """
wait = {wait}
results = "{results}"
approval_url = "https://airlock.test/proposals/{{proposal_id}}"

[tools.refund]
effect_key = "refund:{{order}}"
target = "order"
risk = "high"
summary = "refund {{amount}} on {{order}}"
premise = {{ tool = "refunded_total", arguments = {{ order = "order" }}, keep = ["refunded"] }}
lookup = {{ tool = "find_refund", argument = "effect_key" }}
"""


class Setup:
    def __init__(self, fake: FakeCheckpoint, tmp: Path, env: dict[str, str]) -> None:
        self.fake = fake
        self.tmp = tmp
        self.env = env
        self.counter = tmp / "counter"
        self.config = tmp / "airlock-mcp.toml"

    def counted(self) -> list[str]:
        return self.counter.read_text().split() if self.counter.exists() else []

    def direct(self) -> list[str]:
        return [sys.executable, SERVER, str(self.counter)]

    def proxied(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "airlock.cli",
            "mcp",
            "proxy",
            "--config",
            str(self.config),
            "--",
            *self.direct(),
        ]

    def write_config(self, wait: float = 0) -> None:
        self.config.write_text(CONFIG.format(wait=wait, results=self.tmp / "results.db"))


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    fake = FakeCheckpoint()
    with fake.serve() as url:
        config = gate_files(
            tmp_path, checkpoint_url=url, ledger_url=f"sqlite:///{tmp_path / 'gate.db'}"
        )
        env = {
            "AIRLOCK_GATE_CHECKPOINT_URL": url,
            "AIRLOCK_GATE_TOKEN": config.token,
            "AIRLOCK_GATE_KEYS": str(config.keys),
            "AIRLOCK_GATE_AUDIENCE": config.audience,
            "AIRLOCK_GATE_LEDGER_URL": config.ledger_url,
            "AIRLOCK_GATE_RECEIPT_KEY": str(config.receipt_key),
        }
        s = Setup(fake, tmp_path, env)
        s.write_config()
        yield s


def _session(command: list[str], env: dict[str, str], body: Any) -> Any:
    """Run ``body(session)`` in an MCP session with ``command`` over stdio."""

    async def main() -> Any:
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await body(session)

    return asyncio.run(main())


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content)


def _airlock(result: Any) -> dict[str, Any]:
    meta = result.meta or {}
    return dict(meta.get("airlock", {}))


def test_gated_call_waits_is_approved_and_runs_once(setup: Setup) -> None:
    async def first(session: ClientSession) -> Any:
        return await session.call_tool("refund", {"order": "order-1", "amount": 12500})

    pending = _session(setup.proxied(), setup.env, first)
    # refund declares an output schema: a result without structured content must be an
    # error, or a client that validates (as the SDK's does) drops it.
    assert pending.isError
    assert _text(pending).startswith("E_PENDING")
    assert _airlock(pending)["status"] == "pending"
    assert _airlock(pending)["proposal_id"] == setup.fake.only()
    assert _airlock(pending)["url"] == f"https://airlock.test/proposals/{setup.fake.only()}"
    assert setup.counted() == []

    setup.fake.approve(setup.fake.only())

    async def again(session: ClientSession) -> Any:
        ran = await session.call_tool("refund", {"order": "order-1", "amount": 12500})
        kept = await session.call_tool("refund", {"order": "order-1", "amount": 12500})
        return ran, kept

    ran, kept = _session(setup.proxied(), setup.env, again)
    assert not ran.isError and _text(ran) == "refunded 12500 on order-1"
    assert _airlock(ran)["status"] == "executed"
    assert _text(kept) == _text(ran)
    assert setup.counted() == ["order-1:12500"]
    # the gate reported the run with a receipt
    assert [path for path, _ in setup.fake.receipts] == ["/v1/outcomes"]


def test_edited_call_runs_the_edited_arguments_once_and_says_so(setup: Setup) -> None:
    async def call(session: ClientSession) -> Any:
        return await session.call_tool("refund", {"order": "order-4", "amount": 12500})

    _session(setup.proxied(), setup.env, call)
    edited = setup.fake.edit(setup.fake.only(), amount=5000)
    pending = _session(setup.proxied(), setup.env, call)
    assert _airlock(pending)["proposal_id"] == edited  # the call now waits on the edit
    setup.fake.approve(edited)

    async def twice(session: ClientSession) -> Any:
        return await call(session), await call(session)

    ran, kept = _session(setup.proxied(), setup.env, twice)
    assert not ran.isError
    assert _text(ran) == (
        "A person edited this call before approving it (amount was 12500, now 5000)."
        "refunded 5000 on order-4"
    )
    assert _airlock(ran)["edited"] == {
        "arguments": {"order": "order-4", "amount": 5000},
        "changes": [{"argument": "amount", "was": 12500, "now": 5000}],
    }
    assert _text(kept) == _text(ran)
    assert setup.counted() == ["order-4:5000"]


def test_call_approved_within_the_wait_runs_in_the_same_call(setup: Setup) -> None:
    setup.fake.auto_approve = True
    setup.write_config(wait=5)

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("refund", {"order": "order-2", "amount": 300})

    ran = _session(setup.proxied(), setup.env, body)
    assert _text(ran) == "refunded 300 on order-2"
    assert setup.counted() == ["order-2:300"]


def test_rejected_call_is_a_tool_result_the_model_reads(setup: Setup) -> None:
    async def call(session: ClientSession) -> Any:
        return await session.call_tool("refund", {"order": "order-3", "amount": 100})

    _session(setup.proxied(), setup.env, call)
    setup.fake.reject(setup.fake.only(), "R_WRONG_ORDER", "not this one", "bob")
    rejected = _session(setup.proxied(), setup.env, call)
    assert rejected.isError
    assert _text(rejected).startswith("E_REJECTED")
    assert _airlock(rejected)["status"] == "rejected"
    assert setup.counted() == []


def test_refund_made_by_hand_meanwhile_is_refused_with_what_changed(setup: Setup) -> None:
    async def call(session: ClientSession) -> Any:
        return await session.call_tool("refund", {"order": "order-4", "amount": 100})

    _session(setup.proxied(), setup.env, call)
    setup.counter.write_text("order-4:500\n")  # a person refunded by hand
    setup.fake.approve(setup.fake.only())
    refused = _session(setup.proxied(), setup.env, call)
    assert refused.isError
    assert _airlock(refused)["code"] == "E_PREMISES"
    assert _airlock(refused)["changes"] == [{"field": "refunded", "was": 0, "now": 500}]
    assert setup.counted() == ["order-4:500"]


def test_float_argument_is_refused_before_anything_is_sent(setup: Setup) -> None:
    async def call(session: ClientSession) -> Any:
        return await session.call_tool("refund", {"order": "order-5", "amount": 1.5})

    refused = _session(setup.proxied(), setup.env, call)
    assert refused.isError
    assert setup.fake.proposals == {}
    assert setup.counted() == []


def test_ungated_tool_and_tool_list_pass_through(setup: Setup) -> None:
    async def body(session: ClientSession) -> Any:
        tools = await session.list_tools()
        echo = await session.call_tool("echo", {"text": "hi"})
        return tools.model_dump(), echo.model_dump()

    assert _session(setup.proxied(), setup.env, body) == _session(setup.direct(), setup.env, body)
    assert setup.fake.requests == []


def _raw(
    command: list[str], env: dict[str, str], lines: list[dict[str, Any]], answers: int
) -> bytes:
    """The bytes ``command`` writes on stdout for ``lines``, until ``answers`` lines."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**env, "PATH": "/usr/bin:/bin"},
    )
    assert process.stdin is not None and process.stdout is not None
    for line in lines:
        process.stdin.write(json.dumps(line).encode() + b"\n")
    process.stdin.flush()
    out = b"".join(process.stdout.readline() for _ in range(answers))
    process.stdin.close()
    process.wait(30)
    process.stdout.close()
    return out


def test_every_other_message_is_byte_identical_to_a_direct_connection(setup: Setup) -> None:
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        },
        {"jsonrpc": "2.0", "id": 4, "method": "no/such/method"},
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "no_such_tool", "arguments": {}},
        },
    ]
    direct = _raw(setup.direct(), setup.env, lines, 5)
    assert direct.count(b"\n") == 5
    assert _raw(setup.proxied(), setup.env, lines, 5) == direct


def _refund(order: str, amount: int = 100) -> Any:
    async def call(session: ClientSession) -> Any:
        return await session.call_tool("refund", {"order": order, "amount": amount})

    return call


@pytest.mark.parametrize(
    ("premise", "says"),
    [("broken_premise", "answered an error"), ("partial_premise", "answered no 'refunded'")],
)
def test_premise_tool_that_errors_or_omits_a_field_proposes_nothing(
    setup: Setup, premise: str, says: str
) -> None:
    setup.config.write_text(setup.config.read_text().replace("refunded_total", premise))
    refused = _session(setup.proxied(), setup.env, _refund("order-6"))
    assert refused.isError
    assert _text(refused).startswith("E_PREMISE_TOOL") and says in _text(refused)
    assert setup.fake.proposals == {}
    assert setup.counted() == []


def test_gated_tool_the_server_does_not_list_is_refused(setup: Setup) -> None:
    setup.config.write_text(
        setup.config.read_text() + '\n[tools.ghost]\neffect_key = "g:{x}"\n'
        'target = "x"\nrisk = "low"\n'
    )

    async def call(session: ClientSession) -> Any:
        return await session.call_tool("ghost", {"x": "a"})

    refused = _session(setup.proxied(), setup.env, call)
    assert refused.isError and _text(refused).startswith("E_UNKNOWN_TOOL")
    assert setup.fake.proposals == {}


_INIT: list[dict[str, Any]] = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]


@pytest.mark.parametrize(
    "smuggled",
    [
        # echo to a reader that keeps the first key, refund to one that keeps the last
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo",'
        b'"name":"refund","arguments":{"text":"x","order":"order-7","amount":1}}}\n',
        # the method name escaped, and a duplicate key: no literal "tools/call" to see
        b'{"jsonrpc":"2.0","id":2,"method":"tools\\/call","params":{"name":"refund",'
        b'"arguments":{"order":"order-7","amount":1},"arguments":{"order":"order-7","amount":1}}}\n',
        b"{not json\n",
    ],
)
def test_line_smuggling_a_gated_call_is_refused_not_forwarded(
    setup: Setup, smuggled: bytes
) -> None:
    process = subprocess.Popen(
        setup.proxied(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=setup.env
    )
    assert process.stdin is not None and process.stdout is not None
    for line in _INIT:
        process.stdin.write(json.dumps(line).encode() + b"\n")
    process.stdin.write(smuggled)
    process.stdin.flush()
    # the refusal may come before the server's answer to initialize
    answers = [json.loads(process.stdout.readline()) for _ in range(2)]
    (answer,) = [a for a in answers if a["id"] is None]
    process.stdin.close()
    process.wait(30)
    process.stdout.close()
    assert answer["error"]["code"] == -32700
    assert answer["error"]["message"].startswith("E_PARSE")
    assert setup.fake.proposals == {}
    assert setup.counted() == []


def test_lookup_answering_garbage_leaves_the_call_in_doubt(setup: Setup) -> None:
    """A run that raised is settled by the lookup; one that answers no boolean settles
    nothing: the call is in_doubt, never resolved on a guess."""
    setup.config.write_text(setup.config.read_text().replace("find_refund", "garbage_lookup"))
    setup.fake.auto_approve = True
    # amount "x" is not an int: the server's tool raises, so the gate asks the lookup.
    failed = _session(setup.proxied(), setup.env, _refund("order-8", "x"))  # type: ignore[arg-type]
    assert failed.isError and _airlock(failed)["status"] == "failed"
    again = _session(setup.proxied(), setup.env, _refund("order-8", "x"))  # type: ignore[arg-type]
    assert _text(again) == _text(failed)  # kept: one effect per key, ever
    outcome = [r for path, r in setup.fake.receipts if path == "/v1/outcomes"]
    assert len(outcome) == 1
    payload = json.loads(base64.b64decode(outcome[0]["payload"]))
    assert payload["outcome"] == "in_doubt"


def _start_raw(setup: Setup, env: dict[str, str], call: dict[str, Any]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        setup.proxied(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    assert process.stdin is not None
    for line in [*_INIT, call]:
        process.stdin.write(json.dumps(line).encode() + b"\n")
    process.stdin.flush()
    return process


def _refund_line(order: str, amount: int = 100) -> dict[str, Any]:
    params = {"name": "refund", "arguments": {"order": order, "amount": amount}}
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}


def _lease_over(setup: Setup, effect_key: str) -> bool:
    """Whether the ledger row of ``effect_key`` has a lease that ran out by now, as
    :func:`airlock.ledger.expired` sees it (``lease_expires <= now``, whole seconds)."""
    engine = make_engine(setup.env["AIRLOCK_GATE_LEDGER_URL"])
    try:
        with engine.connect() as conn:
            expires = conn.execute(
                sa.select(ledger.c.lease_expires).where(ledger.c.effect_key == effect_key)
            ).scalar_one()
    finally:
        engine.dispose()
    return bool(expires <= int(time.time()))


def test_proxy_killed_after_the_run_then_retried_runs_once(setup: Setup) -> None:
    setup.fake.auto_approve = True
    setup.write_config(wait=5)
    env = {
        **setup.env,
        "AIRLOCK_ENV": "dev",
        "AIRLOCK_GATE_FAILPOINTS": "after_call",
        # Long enough that a loaded machine does not lose the lease between the consume
        # and the call (1 s did for `airlock gate`: fenced, refused, never called).
        "AIRLOCK_GATE_LEASE_SECONDS": "4",
    }
    process = _start_raw(setup, env, _refund_line("order-9"))
    assert process.stdout is not None
    process.stdout.read()  # until the SIGKILL closes it
    assert process.wait(30) == -9
    process.stdout.close()
    assert process.stdin is not None
    process.stdin.close()
    assert setup.counted() == ["order-9:100"]
    # Recovery takes a row only once its lease ran out, by the gate's clock (whole Unix
    # seconds): wait for that, not for a time.
    wait_for("the killed call's lease to run out", lambda: _lease_over(setup, "refund:order-9"), 30)
    retried = _session(setup.proxied(), setup.env, _refund("order-9"))
    assert retried.isError and _airlock(retried)["code"] == "E_REPLAY"
    assert setup.counted() == ["order-9:100"]
    outcomes = [json.loads(base64.b64decode(r["payload"])) for _, r in setup.fake.receipts]
    assert [o["outcome"] for o in outcomes] == ["succeeded"]  # settled by find_refund


def test_refund_by_hand_while_the_proxy_was_down_is_refused_with_what_changed(
    setup: Setup,
) -> None:
    setup.write_config(wait=60)
    process = _start_raw(setup, setup.env, _refund_line("order-10"))
    deadline = time.monotonic() + 30
    while not setup.fake.proposals:  # the proposal is made: the proxy now waits
        assert time.monotonic() < deadline, "no proposal was made"
        time.sleep(0.05)
    process.kill()
    process.wait(30)
    for pipe in (process.stdin, process.stdout):
        assert pipe is not None
        pipe.close()
    setup.counter.write_text("order-10:500\n")  # a person refunded by hand
    setup.fake.approve(setup.fake.only())
    setup.write_config(wait=0)
    refused = _session(setup.proxied(), setup.env, _refund("order-10"))
    assert refused.isError
    assert _airlock(refused)["changes"] == [{"field": "refunded", "was": 0, "now": 500}]
    assert setup.counted() == ["order-10:500"]


def test_a_waiting_call_blocks_nothing_and_runs_when_approved_within_the_wait(
    setup: Setup,
) -> None:
    setup.write_config(wait=60)

    async def body(session: ClientSession) -> Any:
        refund = asyncio.create_task(
            session.call_tool("refund", {"order": "order-11", "amount": 700})
        )
        deadline = time.monotonic() + 30
        while not setup.fake.proposals:  # proposed: the call now waits for a person
            assert time.monotonic() < deadline, "no proposal was made"
            await asyncio.sleep(0.05)
        echo = await session.call_tool("echo", {"text": "meanwhile"})
        assert not refund.done()
        setup.fake.approve(setup.fake.only())
        return echo, await refund

    echo, ran = _session(setup.proxied(), setup.env, body)
    assert _text(echo) == "meanwhile"
    assert _text(ran) == "refunded 700 on order-11"
    assert setup.counted() == ["order-11:700"]
