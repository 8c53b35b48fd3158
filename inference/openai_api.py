"""The OpenAI-compatible backend: `POST /v1/chat/completions`, chat template applied by the server.

Raw continuations (`generate_ids`, the prompt writer's) go to `POST /v1/completions` with the prompt as token
ids, which SGLang, vLLM and llama.cpp's `llama-server` accept, so no server adds a second BOS to a rendered prefix.

Works with SGLang, vLLM and llama.cpp's `llama-server`. Tokens come from `usage`; a reasoning model's
thinking from `message.reasoning_content` (SGLang/vLLM with a reasoning parser) or from `<think>` markers
left in the content. `--reasoning served-off` sends `chat_template_kwargs.enable_thinking = false`,
`served-on` sends it true. A row's tools go as the request's `tools`, its recorded calls and results as
OpenAI messages (`tool_calls`, `tool` turns), and a server started with a tool-call parser answers with
structured `message.tool_calls`, kept as they come. With the text tool rendering (a template without tool
support) the conversation is sent as datahunt's text turns instead (`core.chat_render.text_turns`).
"""

from __future__ import annotations

import time
from typing import Any, NotRequired, TypedDict

from core.chat_render import ToolRendering, template_kwargs, text_turns
from core.tool_calls import Tool, ToolFormatError, read_calls
from inference.backend import HttpBackend, require_endpoint
from inference.generation import Reasoning, RowError, Sampling, TurnResult, split_thinking

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


class ChatRequest(TypedDict):
    """A `/v1/chat/completions` request body as this backend sends it."""

    model: str
    messages: list[dict[str, Any]]
    temperature: float
    top_p: float
    max_tokens: int
    stream: bool
    seed: NotRequired[int]
    chat_template_kwargs: NotRequired[dict[str, bool]]
    tools: NotRequired[list[Tool]]


class CompletionRequest(TypedDict):
    """A `/v1/completions` request body: the prompt as token ids."""

    model: str
    prompt: list[int]
    temperature: float
    top_p: float
    max_tokens: int
    stream: bool
    seed: NotRequired[int]
    stop: NotRequired[list[str]]


def api_base(endpoint: str) -> str:
    """Return the server root for `endpoint`, accepting URLs given with or without a trailing `/v1`."""
    base = endpoint.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


class OpenAIChatBackend(HttpBackend):
    """Answers a turn through `/v1/chat/completions`, on the session it owns (`HttpBackend`)."""

    api = "openai"

    def __init__(self, *, model: str | None = None, reasoning: Reasoning = Reasoning.KEEP,
                 tool_rendering: ToolRendering = ToolRendering.NATIVE) -> None:
        super().__init__()
        self.model = model
        self.reasoning = reasoning
        self.tool_rendering = tool_rendering

    def payload(self, history: list[dict[str, Any]], sampling: Sampling, tools: list[Tool] | None = None
                ) -> ChatRequest:
        """Return the request body for `history` at `sampling`, offering `tools`."""
        text = self.tool_rendering is ToolRendering.TEXT
        body: ChatRequest = {
            "model": self.model or "default",
            "messages": list(text_turns(history, tools)) if text else history,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "stream": False,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if kwargs := template_kwargs(self.reasoning):
            body["chat_template_kwargs"] = kwargs
        if tools and not text:
            body["tools"] = tools
        return body

    async def generate_turn(self, history: list[dict[str, Any]], sampling: Sampling, *,
                            endpoint: str | None = None, tools: list[Tool] | None = None) -> TurnResult:
        """Return the answer of the server at `endpoint` to the last turn of `history`, offering `tools`."""
        url = api_base(require_endpoint(self, endpoint)) + CHAT_PATH
        started = time.monotonic()
        body = await self.post(url, self.payload(history, sampling, tools))
        return parse_chat_completion(body, time.monotonic() - started)

    async def generate_ids(self, ids: list[int], sampling: Sampling, *, stop: tuple[str, ...] = (),
                           endpoint: str | None = None) -> TurnResult:
        """Continue the raw prompt `ids` through `/v1/completions`, stopping at `stop` or the model's end of turn."""
        body: CompletionRequest = {"model": self.model or "default", "prompt": ids,
                                   "temperature": sampling.temperature, "top_p": sampling.top_p,
                                   "max_tokens": sampling.max_tokens, "stream": False}
        if stop:
            body["stop"] = list(stop)
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        url = api_base(require_endpoint(self, endpoint)) + COMPLETIONS_PATH
        started = time.monotonic()
        answer = await self.post(url, body)
        return parse_completion(answer, time.monotonic() - started)


def parse_completion(body: dict[str, Any], latency_s: float) -> TurnResult:
    """Return the TurnResult of a `/v1/completions` answer (`choices[0].text`); raise RowError when malformed."""
    try:
        choice = body["choices"][0]
        text = choice["text"]
    except (KeyError, IndexError, TypeError):
        raise RowError(f"malformed completion: no choices[0].text in {str(body)[:200]}") from None
    if not isinstance(text, str):
        raise RowError("malformed completion: choices[0].text is not text")
    usage = body.get("usage") or {}
    return TurnResult(content=text, reasoning=None, finish_reason=choice.get("finish_reason"),
                      prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                      latency_s=latency_s, model=body.get("model"))


def parse_chat_completion(body: dict[str, Any], latency_s: float) -> TurnResult:
    """Return the TurnResult of a chat-completion answer; raise RowError when it is malformed."""
    try:
        choice = body["choices"][0]
        message = choice["message"]
        content = message.get("content")
    except (KeyError, IndexError, TypeError):
        raise RowError(f"malformed chat completion: no choices[0].message in {str(body)[:200]}") from None
    if content is not None and not isinstance(content, str):
        raise RowError("malformed chat completion: message.content is not text")
    reasoning = message.get("reasoning_content") or message.get("reasoning") or None
    content = content or ""
    if reasoning is None:
        reasoning, content = split_thinking(content)
    try:
        calls = read_calls(message["tool_calls"], "call") if message.get("tool_calls") else None
    except ToolFormatError as exc:
        raise RowError(f"malformed chat completion: {exc.detail}") from None
    usage = body.get("usage") or {}
    return TurnResult(
        tool_calls=calls,
        content=content,
        reasoning=reasoning,
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        latency_s=latency_s,
        model=body.get("model"),
    )
