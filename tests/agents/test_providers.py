"""The chat APIs: each provider sends the documented request shape and reads the
documented answer (tests/agents/shapes/, written from the public API references), over
an ``httpx.MockTransport``; an answer of another shape is ProviderError, never a guess.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from airlock.agents import (
    AnthropicMessages,
    Call,
    Done,
    Message,
    OpenAIChat,
    Paused,
    ProviderError,
    Reply,
)

from .support import World

SHAPES = Path(__file__).parent / "shapes"
SYSTEM = "You handle refunds."
TASK = "How much was order 881?"


def shape(name: str) -> Any:
    return json.loads((SHAPES / f"{name}.json").read_text())


class Recorder:
    """A chat API played by a MockTransport: answers in order, requests recorded."""

    def __init__(self, answers: list[tuple[int, Any]]) -> None:
        self.answers = iter(answers)
        self.requests: list[httpx.Request] = []

    def client(self) -> httpx.Client:
        def respond(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            status, body = next(self.answers)
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            return httpx.Response(status, content=content)

        return httpx.Client(transport=httpx.MockTransport(respond))

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) for r in self.requests]


def _openai(recorder: Recorder) -> OpenAIChat:
    return OpenAIChat(
        model="gpt-test", api_key="sk-test", base_url="https://llm.test/v1", http=recorder.client()
    )


def _anthropic(recorder: Recorder) -> AnthropicMessages:
    return AnthropicMessages(
        model="claude-test",
        api_key="ak-test",
        base_url="https://anthropic.test",
        http=recorder.client(),
    )


def test_openai_sends_and_reads_the_documented_shapes(world: World) -> None:
    recorder = Recorder([(200, shape("openai_response_1")), (200, shape("openai_response_2"))])
    agent, _ = world.process(provider=_openai(recorder), system=SYSTEM)
    done = agent.run(TASK)
    assert isinstance(done, Done)
    assert done.text == "Order 881 came to 125.00."
    first, second = recorder.bodies()
    assert _without_refund(first) == shape("openai_request_1")
    assert _without_refund(second) == shape("openai_request_2")
    request = recorder.requests[0]
    assert (request.method, str(request.url)) == ("POST", "https://llm.test/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert world.payments.lookups == 1


def test_anthropic_sends_and_reads_the_documented_shapes(world: World) -> None:
    recorder = Recorder(
        [(200, shape("anthropic_response_1")), (200, shape("anthropic_response_2"))]
    )
    agent, _ = world.process(provider=_anthropic(recorder), system=SYSTEM)
    done = agent.run(TASK)
    assert done == Done(done.run_id, "Order 881 came to 125.00.")
    first, second = recorder.bodies()
    assert _without_refund(first) == shape("anthropic_request_1")
    assert _without_refund(second) == shape("anthropic_request_2")
    request = recorder.requests[0]
    assert (request.method, str(request.url)) == ("POST", "https://anthropic.test/v1/messages")
    assert request.headers["x-api-key"] == "ak-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers


def _without_refund(body: dict[str, Any]) -> dict[str, Any]:
    """The body with the sensitive tool's declaration taken out (the shapes declare the
    safe tool only); every other field is compared whole."""
    body = dict(body)
    body["tools"] = [
        t for t in body["tools"] if t.get("name", t.get("function", {}).get("name")) != "refund"
    ]
    return body


def _anthropic_tool_use(call_id: str, name: str, args: Any) -> dict[str, Any]:
    return {
        "id": "msg_x",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "tool_use", "id": call_id, "name": name, "input": args}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def test_an_anthropic_run_pauses_at_the_gate_and_resumes_in_a_new_process(world: World) -> None:
    refund = {"order": "order-881", "amount": 12500}
    final = shape("anthropic_response_2")
    first = Recorder([(200, _anthropic_tool_use("toolu_r", "refund", refund))])
    agent, _ = world.process(provider=_anthropic(first))
    paused = agent.run("Refund order 881")
    assert isinstance(paused, Paused)
    assert paused.proposal_id == world.fake.only()
    world.fake.approve(world.fake.only())

    second = Recorder([(200, final)])
    agent, _ = world.process(provider=_anthropic(second))
    assert isinstance(agent.resume(paused.run_id), Done)
    assert world.payments.refunds == [("order-881", 12500, "refund:order-881")]
    (body,) = second.bodies()
    assert body["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_r",
                "content": "re_order-881",
                "is_error": False,
            }
        ],
    }


def test_anthropic_puts_a_turns_tool_results_in_one_user_message() -> None:
    provider = AnthropicMessages(model="m", api_key="k", http=httpx.Client())
    calls = (Call("t1", "find_order", {"order": "a"}), Call("t2", "find_order", {"order": "b"}))
    body = provider.request(
        [
            Message("user", "both"),
            Message("assistant", "", calls),
            Message("tool", "A", call_id="t1"),
            Message("tool", "E_ARGUMENTS: no", call_id="t2", is_error=True),
        ],
        [],
        system=None,
    )
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert [b["tool_use_id"] for b in body["messages"][2]["content"]] == ["t1", "t2"]
    assert body["messages"][2]["content"][1]["is_error"] is True
    assert "system" not in body
    assert "tools" not in body


def _openai_call(arguments: Any) -> dict[str, Any]:
    answer = shape("openai_response_1")
    answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = arguments
    return answer


MALFORMED: dict[str, Callable[[], tuple[Callable[[Recorder], Any], tuple[int, Any]]]] = {
    "openai_arguments_not_json": lambda: (_openai, (200, _openai_call("{order: 881"))),
    "openai_arguments_an_array": lambda: (_openai, (200, _openai_call('["order-881"]'))),
    "openai_no_choices": lambda: (_openai, (200, {"object": "chat.completion", "choices": []})),
    "openai_http_500": lambda: (_openai, (500, {"error": {"message": "overloaded"}})),
    "openai_not_json": lambda: (_openai, (200, b"<html>proxy error</html>")),
    "anthropic_unknown_block": lambda: (
        _anthropic,
        (200, {**shape("anthropic_response_2"), "content": [{"type": "image", "source": {}}]}),
    ),
    "anthropic_input_a_string": lambda: (
        _anthropic,
        (200, _anthropic_tool_use("toolu_x", "find_order", "order-881")),
    ),
    "anthropic_an_error_object": lambda: (
        _anthropic,
        (200, {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}),
    ),
}


@pytest.fixture(params=sorted(MALFORMED))
def malformed(request: pytest.FixtureRequest) -> Iterator[tuple[Any, tuple[int, Any]]]:
    yield MALFORMED[request.param]()


def test_a_malformed_answer_is_a_provider_error_and_runs_nothing(
    world: World, malformed: tuple[Any, tuple[int, Any]]
) -> None:
    make, answer = malformed
    recorder = Recorder([answer])
    agent, _ = world.process(provider=make(recorder))
    with pytest.raises(ProviderError):
        agent.run(TASK)
    assert world.payments.lookups == 0
    assert world.fake.proposals == {}


def test_a_transport_failure_is_a_provider_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("unreachable", request=request)

    provider = OpenAIChat(
        model="m",
        api_key="sk-secret",
        base_url="https://llm.test/v1",
        http=httpx.Client(transport=httpx.MockTransport(refuse)),
    )
    with pytest.raises(ProviderError) as err:
        provider.complete([Message("user", "hi")], [], system=None)
    assert "sk-secret" not in str(err.value)
    assert "sk-secret" not in repr(provider)


def test_the_reply_of_a_text_only_answer_has_no_calls() -> None:
    assert OpenAIChat.reply(shape("openai_response_2")) == Reply("Order 881 came to 125.00.")
    assert AnthropicMessages.reply(shape("anthropic_response_2")) == Reply(
        "Order 881 came to 125.00."
    )
