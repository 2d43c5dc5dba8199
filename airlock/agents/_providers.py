"""Providers: the model behind the loop, as one method over the neutral conversation.

:class:`Provider` is the port. :class:`ScriptedProvider` plays a fixed script (tests and
demos, no network, deterministic). :class:`OpenAIChat` speaks OpenAI-compatible chat
completions with ``tools``; :class:`AnthropicMessages` speaks Anthropic's Messages API
with ``tool_use`` blocks. Both over an ``httpx.Client`` the caller may pass (a
``MockTransport`` in tests); an answer outside the documented shape is
:class:`ProviderError`, never a guess.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import httpx

from ._model import Call, Message, Reply, Tool
from .errors import ProviderError

__all__ = ["AnthropicMessages", "OpenAIChat", "Provider", "ScriptedProvider"]


class Provider(Protocol):
    """The model: given the conversation so far and the tools, its next turn."""

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, system: str | None
    ) -> Reply: ...


Step = Reply | Callable[[Sequence[Message]], Reply]


class ScriptedProvider:
    """A model that plays ``script``: its n-th turn is ``script[n]``, a :class:`Reply` or
    a function of the conversation (to answer what a tool returned).

    The turn is counted from the conversation (its assistant messages), not kept in
    memory, so a run resumed by a new process over a new ``ScriptedProvider`` continues
    the script where it stopped. ``seen`` records the conversation of every turn.
    Running past the end is :class:`ProviderError`.
    """

    def __init__(self, script: Sequence[Step]) -> None:
        self._script = tuple(script)
        self.seen: list[tuple[Message, ...]] = []

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, system: str | None
    ) -> Reply:
        turn = sum(1 for m in messages if m.role == "assistant")
        if turn >= len(self._script):
            raise ProviderError(f"the script has {len(self._script)} turns; asked for more")
        self.seen.append(tuple(messages))
        step = self._script[turn]
        return step if isinstance(step, Reply) else step(messages)


def _post(http: httpx.Client, url: str, headers: Mapping[str, str], body: Any) -> Any:
    try:
        response = http.post(url, headers=dict(headers), json=body)
    except httpx.HTTPError as exc:
        raise ProviderError(f"{url}: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise ProviderError(f"{url}: HTTP {response.status_code}")
    try:
        return response.json()
    except ValueError:
        raise ProviderError(f"{url}: the answer is not JSON") from None


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ProviderError(f"{where}: tool arguments are not a JSON object")
    return raw


class OpenAIChat:
    """OpenAI-compatible chat completions with tools (``POST {base_url}/chat/completions``).

    Request: ``messages`` with ``role`` system, user, assistant (``tool_calls``: ``id``,
    ``type: function``, ``function.name``, ``function.arguments`` as a JSON string) and
    tool (``tool_call_id``, ``content``); ``tools``: ``{"type": "function", "function":
    {name, description, parameters}}``. Answer: ``choices[0].message``'s ``content``
    and ``tool_calls``. Arguments that are not a JSON object are :class:`ProviderError`.

    Args:
        model: the model name sent.
        api_key: sent as ``Authorization: Bearer``.
        base_url: e.g. ``https://api.openai.com/v1`` or any compatible server.
        http: the client to send with (default: TLS verified, no redirects, 60 s).
    """

    def __init__(
        self, *, model: str, api_key: str, base_url: str, http: httpx.Client | None = None
    ) -> None:
        self._model = model
        self._key = api_key
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._http = http or httpx.Client(verify=True, follow_redirects=False, timeout=60.0)

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self._model!r}, url={self._url!r})"  # never the key

    def request(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, system: str | None
    ) -> dict[str, Any]:
        """The request body for this conversation (pure)."""
        wire: list[dict[str, Any]] = (
            [] if system is None else [{"role": "system", "content": system}]
        )
        for m in messages:
            if m.role == "user":
                wire.append({"role": "user", "content": m.text})
            elif m.role == "assistant":
                out: dict[str, Any] = {"role": "assistant", "content": m.text or None}
                if m.calls:
                    out["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                        }
                        for c in m.calls
                    ]
                wire.append(out)
            else:
                wire.append({"role": "tool", "tool_call_id": m.call_id, "content": m.text})
        body: dict[str, Any] = {"model": self._model, "messages": wire}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in tools
            ]
        return body

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, system: str | None
    ) -> Reply:
        answer = _post(
            self._http,
            self._url,
            {"Authorization": f"Bearer {self._key}"},
            self.request(messages, tools, system=system),
        )
        return self.reply(answer)

    @staticmethod
    def reply(answer: Any) -> Reply:
        """The :class:`Reply` in a chat completion; :class:`ProviderError` if it has
        another shape."""
        try:
            message = answer["choices"][0]["message"]
            text = message.get("content") or ""
            calls = []
            for c in message.get("tool_calls") or ():
                if c["type"] != "function":
                    raise ProviderError(f"tool call {c['id']}: type {c['type']!r}")
                try:
                    raw = json.loads(c["function"]["arguments"])
                except (TypeError, ValueError):
                    raise ProviderError(f"tool call {c['id']}: arguments are not JSON") from None
                calls.append(
                    Call(str(c["id"]), str(c["function"]["name"]), _arguments(raw, c["id"]))
                )
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ProviderError("the chat completion has no choices[0].message") from None
        if not isinstance(text, str):
            raise ProviderError("the chat completion's content is not text")
        return Reply(text, tuple(calls))


class AnthropicMessages:
    """Anthropic's Messages API with tools (``POST {base_url}/v1/messages``).

    Request: ``system``, ``messages`` alternating user and assistant, the assistant's
    ``content`` a list of ``text`` and ``tool_use`` blocks (``id``, ``name``, ``input``),
    the results as ``tool_result`` blocks (``tool_use_id``, ``content``, ``is_error``)
    in the next user message; ``tools``: ``{name, description, input_schema}``. Answer:
    ``content`` blocks of the assistant message.

    Args:
        model: the model name sent.
        api_key: sent as ``x-api-key``, with ``anthropic-version: 2023-06-01``.
        max_tokens: the ``max_tokens`` of each request.
        base_url: default ``https://api.anthropic.com``.
        http: the client to send with (default: TLS verified, no redirects, 60 s).
    """

    VERSION = "2023-06-01"

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        max_tokens: int = 1024,
        base_url: str = "https://api.anthropic.com",
        http: httpx.Client | None = None,
    ) -> None:
        self._model = model
        self._key = api_key
        self._max_tokens = max_tokens
        self._url = base_url.rstrip("/") + "/v1/messages"
        self._http = http or httpx.Client(verify=True, follow_redirects=False, timeout=60.0)

    def __repr__(self) -> str:
        return f"AnthropicMessages(model={self._model!r}, url={self._url!r})"  # never the key

    def request(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, system: str | None
    ) -> dict[str, Any]:
        """The request body for this conversation (pure)."""
        wire: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "assistant":
                blocks: list[dict[str, Any]] = []
                if m.text:
                    blocks.append({"type": "text", "text": m.text})
                blocks += [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                    for c in m.calls
                ]
                wire.append({"role": "assistant", "content": blocks})
                continue
            block: dict[str, Any] = (
                {"type": "text", "text": m.text}
                if m.role == "user"
                else {
                    "type": "tool_result",
                    "tool_use_id": m.call_id,
                    "content": m.text,
                    "is_error": m.is_error,
                }
            )
            # The API alternates roles: a turn's tool results are one user message.
            if wire and wire[-1]["role"] == "user":
                wire[-1]["content"].append(block)
            else:
                wire.append({"role": "user", "content": [block]})
        body: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "messages": wire,
        }
        if system is not None:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in tools
            ]
        return body

    def complete(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, system: str | None
    ) -> Reply:
        answer = _post(
            self._http,
            self._url,
            {"x-api-key": self._key, "anthropic-version": self.VERSION},
            self.request(messages, tools, system=system),
        )
        return self.reply(answer)

    @staticmethod
    def reply(answer: Any) -> Reply:
        """The :class:`Reply` in a Messages answer; :class:`ProviderError` if it has
        another shape."""
        try:
            if answer["type"] != "message" or answer["role"] != "assistant":
                raise ProviderError("the answer is not an assistant message")
            texts: list[str] = []
            calls: list[Call] = []
            for block in answer["content"]:
                if block["type"] == "text":
                    texts.append(str(block["text"]))
                elif block["type"] == "tool_use":
                    calls.append(
                        Call(
                            str(block["id"]),
                            str(block["name"]),
                            _arguments(block["input"], str(block["id"])),
                        )
                    )
                else:
                    raise ProviderError(f"content block of type {block['type']!r}")
        except (KeyError, TypeError):
            raise ProviderError("the message has no content blocks") from None
        return Reply("\n".join(texts), tuple(calls))
