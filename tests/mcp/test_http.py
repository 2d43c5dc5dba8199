"""``airlock mcp proxy --http PORT`` against the real FastMCP server subprocess and the
fake checkpoint, with the SDK's own streamable HTTP client: the agent's side is HTTP,
the relay and the gated path are the stdio proxy's. One fake checkpoint and one proxy
process per config for the module; each test uses orders of its own."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from airlock.mcp import ConfigError, ProxyConfig, serve_http
from tests.gate.support import FakeCheckpoint, gate_files
from tests.mcp.test_proxy import CONFIG, SERVER

_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stack:
    """The fake checkpoint, the gate's files, and a proxy process per ``wait``."""

    def __init__(self, fake: FakeCheckpoint, tmp: Path, env: dict[str, str]) -> None:
        self.fake = fake
        self.tmp = tmp
        self.env = env
        self.counter = tmp / "counter"
        self._proxies: dict[str, tuple[subprocess.Popen[bytes], str, Any]] = {}

    def counted(self) -> list[str]:
        return self.counter.read_text().split() if self.counter.exists() else []

    def started(self) -> int:
        """How many refunds servers were started so far."""
        starts = self.counter.with_suffix(".starts")
        return len(starts.read_text().split()) if starts.exists() else 0

    def direct(self) -> list[str]:
        return [sys.executable, SERVER, str(self.counter)]

    def deaf(self) -> list[str]:
        """The refunds server in a process that stays 60 s after its stdin closed; each
        writes its pid to ``deaf.pid``."""
        code = (
            "import os, runpy, sys, time; "
            f"open({str(self.tmp / 'deaf.pid')!r}, 'w').write(str(os.getpid())); "
            f"sys.argv = [{SERVER!r}, {str(self.counter)!r}]; "
            f"runpy.run_path({SERVER!r}, run_name='__main__'); time.sleep(60)"
        )
        return [sys.executable, "-c", code]

    def url(self, wait: float = 0, server: list[str] | None = None) -> str:
        """The endpoint of a proxy whose gated calls wait ``wait`` s, in front of
        ``server`` (default the refunds server); started once."""
        command = server or self.direct()
        name = f"{wait}-{len(self._proxies)}"
        for _, url, started in self._proxies.values():
            if started == (wait, command):
                return url
        config = self.tmp / f"airlock-mcp-{name}.toml"
        config.write_text(CONFIG.format(wait=wait, results=self.tmp / "results.db"))
        port = _free_port()
        proxy = [sys.executable, "-m", "airlock.cli", "mcp", "proxy", "--config", str(config)]
        proxy += ["--http", str(port), "--", *command]
        log = (self.tmp / f"proxy-{name}.log").open("wb")
        process = subprocess.Popen(proxy, env=self.env, stderr=log)
        log.close()
        url = f"http://127.0.0.1:{port}/mcp"
        self._proxies[name] = (process, url, (wait, command))
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, self.log(name)
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                return url
            except OSError:
                assert time.monotonic() < deadline, "the proxy did not listen"
                time.sleep(0.1)

    def log(self, name: str) -> str:
        return (self.tmp / f"proxy-{name}.log").read_text()

    def proposal(self, effect_key: str) -> str | None:
        found = [p for p, r in list(self.fake.proposals.items()) if r.call.effect_key == effect_key]
        return found[0] if found else None

    def stop(self) -> dict[str, int]:
        codes = {}
        for name, (process, _, _) in self._proxies.items():
            process.terminate()
            codes[name] = process.wait(30)
        return codes


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("mcp-http")
    fake = FakeCheckpoint()
    with fake.serve() as url:
        config = gate_files(tmp, checkpoint_url=url, ledger_url=f"sqlite:///{tmp / 'gate.db'}")
        env = {
            "PATH": "/usr/bin:/bin",
            "AIRLOCK_GATE_CHECKPOINT_URL": url,
            "AIRLOCK_GATE_TOKEN": config.token,
            "AIRLOCK_GATE_KEYS": str(config.keys),
            "AIRLOCK_GATE_AUDIENCE": config.audience,
            "AIRLOCK_GATE_LEDGER_URL": config.ledger_url,
            "AIRLOCK_GATE_RECEIPT_KEY": str(config.receipt_key),
        }
        s = Stack(fake, tmp, env)
        try:
            yield s
        finally:
            codes = s.stop()
        # SIGTERM ends the proxy (uvicorn re-raises the signal it caught); nothing crashed.
        assert set(codes.values()) <= {0, -signal.SIGTERM}, codes
        for name in codes:
            assert "Traceback" not in s.log(name), s.log(name)


def _over_http(url: str, body: Any) -> Any:
    """``(initialize result, body(session))`` in one MCP session over HTTP."""

    async def main() -> Any:
        async with (
            streamable_http_client(url) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            return init, await body(session)

    return asyncio.run(main())


def _over_stdio(command: list[str], env: dict[str, str], body: Any) -> Any:
    async def main() -> Any:
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            return init, await body(session)

    return asyncio.run(main())


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content)


def _airlock(result: Any) -> dict[str, Any]:
    return dict((result.meta or {}).get("airlock", {}))


def _refund(order: str, amount: int, times: int = 1) -> Any:
    async def call(session: ClientSession) -> Any:
        return [
            await session.call_tool("refund", {"order": order, "amount": amount})
            for _ in range(times)
        ]

    return call


def test_tool_list_and_ungated_result_equal_a_direct_connection(stack: Stack) -> None:
    async def body(session: ClientSession) -> Any:
        tools = await session.list_tools()
        echo = await session.call_tool("echo", {"text": "hi"})
        return tools.model_dump(), echo.model_dump()

    init, (tools, echo) = _over_http(stack.url(), body)
    direct_init, (direct_tools, direct_echo) = _over_stdio(stack.direct(), stack.env, body)
    assert init.model_dump() == direct_init.model_dump()
    assert tools == direct_tools and echo == direct_echo
    assert echo["content"][0]["text"] == "hi"


def test_gated_call_over_http_waits_is_approved_runs_once_and_is_kept(stack: Stack) -> None:
    async def body(session: ClientSession) -> Any:
        arguments = {"order": "order-h1", "amount": 12500}
        pending = await session.call_tool("refund", arguments)
        before = stack.counted()
        stack.fake.approve(_airlock(pending)["proposal_id"])
        ran = await session.call_tool("refund", arguments)
        return pending, before, ran, await session.call_tool("refund", arguments)

    pending, before, ran, kept = _over_http(stack.url(), body)[1]
    assert pending.isError and _text(pending).startswith("E_PENDING")
    status = _airlock(pending)
    assert status["status"] == "pending"
    assert status["proposal_id"] == stack.proposal("refund:order-h1")
    assert status["url"] == f"https://airlock.test/proposals/{status['proposal_id']}"
    assert "order-h1:12500" not in before
    assert not ran.isError and _text(ran) == "refunded 12500 on order-h1"
    assert _airlock(ran)["status"] == "executed"
    assert kept.model_dump() == ran.model_dump()
    assert [c for c in stack.counted() if c.startswith("order-h1:")] == ["order-h1:12500"]


def _post(client: httpx.Client, url: str, body: bytes, **headers: str) -> httpx.Response:
    return client.post(url, content=body, headers={**_HEADERS, **headers})


def _sse_messages(response: httpx.Response) -> list[dict[str, Any]]:
    return [
        json.loads(line.removeprefix("data:"))
        for line in response.text.splitlines()
        if line.startswith("data:") and line.removeprefix("data:").strip()
    ]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"', -32700),
        (b'{"jsonrpc":"2.0","id":1}', -32602),  # neither a request nor a response
        (b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]', -32602),  # a batch
    ],
)
def test_malformed_json_rpc_opening_a_session_gets_a_json_rpc_error(
    stack: Stack, body: bytes, code: int
) -> None:
    with httpx.Client(timeout=10) as client:
        answer = _post(client, stack.url(), body)
    assert answer.status_code == 400
    assert answer.json()["jsonrpc"] == "2.0" and answer.json()["error"]["code"] == code


def _raw_in_session(url: str, bodies: list[bytes]) -> tuple[list[httpx.Response], Any]:
    """Open a session with the SDK's client, POST each of ``bodies`` in it by hand, then
    call ``echo`` through the client: the raw answers and the echo."""

    async def main() -> Any:
        async with (
            streamable_http_client(url) as (read, write, session_id),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            headers = {
                **_HEADERS,
                "Mcp-Session-Id": session_id() or "",
                "Mcp-Protocol-Version": str(init.protocolVersion),
            }
            async with httpx.AsyncClient(timeout=10) as client:
                answers = [await client.post(url, content=b, headers=headers) for b in bodies]
            return answers, await session.call_tool("echo", {"text": "still here"})

    return asyncio.run(main())  # type: ignore[no-any-return]


def test_malformed_json_rpc_in_a_session_gets_a_json_rpc_error_and_the_session_lives(
    stack: Stack,
) -> None:
    # valid JSON-RPC, but no valid tools/call: the relay's own protocol error
    bad = {
        "jsonrpc": "2.0",
        "id": "bad-1",
        "method": "tools/call",
        "params": {"name": "refund", "arguments": "order-h3"},
    }
    (junk, invalid), echo = _raw_in_session(stack.url(), [b"{not json", json.dumps(bad).encode()])
    assert junk.status_code == 400 and junk.json()["error"]["code"] == -32700
    (answer,) = _sse_messages(invalid)
    assert answer["id"] == "bad-1"
    assert answer["error"]["code"] == -32600
    assert answer["error"]["message"].startswith("E_INVALID")
    assert _text(echo) == "still here"
    assert stack.proposal("refund:order-h3") is None


def test_progress_goes_on_the_stream_of_the_request_that_asked_for_it(stack: Stack) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": "steps-1",
        "method": "tools/call",
        "params": {"name": "steps", "arguments": {"n": 2}, "_meta": {"progressToken": "t-1"}},
    }
    (answer,), _ = _raw_in_session(stack.url(), [json.dumps(call).encode()])
    messages = _sse_messages(answer)
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"]) for p in progress] == [("t-1", 1), ("t-1", 2)]
    assert messages[-1]["id"] == "steps-1"
    assert messages[-1]["result"]["content"][0]["text"] == "done"


def test_two_agent_sessions_at_once_each_get_their_own_answers(stack: Stack) -> None:
    url = stack.url(wait=30, server=stack.deaf())

    async def main() -> Any:
        async with (
            streamable_http_client(url) as (read_a, write_a, id_a),
            ClientSession(read_a, write_a) as a,
            streamable_http_client(url) as (read_b, write_b, id_b),
            ClientSession(read_b, write_b) as b,
        ):
            await asyncio.gather(a.initialize(), b.initialize())
            refund = asyncio.create_task(
                a.call_tool("refund", {"order": "order-h4", "amount": 700})
            )
            deadline = time.monotonic() + 30
            while (pid := stack.proposal("refund:order-h4")) is None:
                assert time.monotonic() < deadline, "no proposal was made"
                await asyncio.sleep(0.05)
            # a's call waits for a person; b is served meanwhile
            echoes = await asyncio.gather(
                b.call_tool("echo", {"text": "from b"}), a.call_tool("echo", {"text": "from a"})
            )
            assert not refund.done()
            stack.fake.approve(pid)
            ran = await refund
            # b's own server subprocess never ran it: the result a's run left is kept
            kept = await b.call_tool("refund", {"order": "order-h4", "amount": 700})
            return id_a(), id_b(), echoes, ran, kept

    id_a, id_b, (echo_b, echo_a), ran, kept = asyncio.run(main())
    assert id_a and id_b and id_a != id_b
    assert (_text(echo_b), _text(echo_a)) == ("from b", "from a")
    assert _text(ran) == "refunded 700 on order-h4"
    assert kept.model_dump() == ran.model_dump()
    assert [c for c in stack.counted() if c.startswith("order-h4:")] == ["order-h4:700"]


@pytest.mark.parametrize(
    ("headers", "status"),
    [({"Host": "attacker.example"}, 421), ({"Origin": "http://attacker.example"}, 403)],
)
def test_request_from_a_page_under_another_name_is_refused(
    stack: Stack, headers: dict[str, str], status: int
) -> None:
    """DNS rebinding: a page in the agent's browser reaching the proxy's port."""
    with httpx.Client(timeout=10) as client:
        answer = _post(client, stack.url(), json.dumps(_INIT).encode(), **headers)
    assert answer.status_code == status
    assert "Mcp-Session-Id" not in answer.headers


def test_requests_that_open_no_session_start_no_server(stack: Stack) -> None:
    """A bad body, or one from a page under another name, costs the proxy no process:
    only the good session that follows starts a server (each writes a line at start)."""
    url = stack.url()
    started = stack.started()
    with httpx.Client(timeout=10) as client:
        for sent in (b"{not json", b'{"jsonrpc":"2.0","id":1}', json.dumps(_INIT).encode()):
            assert _post(client, url, sent, Host="attacker.example").status_code == 421
            assert _post(client, url, sent, Origin="http://x.example").status_code == 403
        assert _post(client, url, b"{not json").status_code == 400

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("echo", {"text": "hi"})

    _over_http(url, body)
    assert stack.started() == started + 1


def test_binding_a_non_loopback_address_is_refused_without_allow_remote(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CONFIG.format(wait=0, results=tmp_path / "r.db"))
    config = ProxyConfig.load(tmp_path / "c.toml")

    def no_gate() -> Any:
        raise AssertionError("no gate is made for a refused bind")

    with pytest.raises(ConfigError, match=r"E_CONFIG: --host 0\.0\.0\.0 is not a loopback"):
        serve_http(config, no_gate, ["true"], port=_free_port(), host="0.0.0.0")
    with pytest.raises(ConfigError, match="not a loopback"):
        serve_http(config, no_gate, ["true"], port=_free_port(), host="proxy.example")


def test_server_that_ignores_the_end_of_its_session_is_stopped(stack: Stack) -> None:
    """A server that does not exit when its stdin closes is stopped (SIGTERM after a
    grace), not left running for every session that ever ended."""
    url = stack.url(wait=30, server=stack.deaf())

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("echo", {"text": "hi"})

    _, echo = _over_http(url, body)  # the client ends the session (DELETE) on leaving
    assert _text(echo) == "hi"
    pid = int((stack.tmp / "deaf.pid").read_text())  # this session's: it started last
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, "the server outlived its session"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
