"""SGLang's native backend: `POST /generate` with a prompt the client renders from the target's template.

The request carries `input_ids` by default: the conversation rendered once with the target's chat template
and tokenized without added special tokens. Sending `text` instead (`send_text`) is an explicit choice with
a known cost: SGLang tokenizes text with special tokens added and keeps the BOS for Llama/Gemma tokenizers,
so a rendered prompt that already starts with BOS reaches the model with two. The answer's `meta_info` gives
the finish reason (`{type: stop|length|abort}`), prompt/completion tokens and, on a finished answer that
verified at least once under speculative decoding, `spec_verify_ct`, `spec_accept_length` (=
completion_tokens / spec_verify_ct), `spec_num_correct_drafts` and `spec_num_proposed_drafts`; an answer
that verified nothing carries none of them. An `abort` finish is retried: SGLang aborts requests when it
sheds load.
"""

from __future__ import annotations

import time
from typing import Any, NotRequired, TypedDict

from core.chat_render import tool_support
from core.spec_counters import SpecCounters
from core.tool_calls import Tool
from inference.backend import HttpBackend, require_endpoint
from inference.chat_template import ChatRenderer
from inference.generation import (
    Reasoning,
    RetryableError,
    RowError,
    Sampling,
    TurnResult,
    split_thinking,
)

GENERATE_PATH = "/generate"


class SamplingParams(TypedDict):
    """`/generate`'s `sampling_params` as this backend sends them."""

    max_new_tokens: int
    temperature: float
    top_p: float
    sampling_seed: NotRequired[int]
    stop: NotRequired[list[str]]


class GenerateRequest(TypedDict):
    """A `/generate` request body: the prompt as token ids (or, with `send_text`, as text) and its sampling."""

    sampling_params: SamplingParams
    stream: bool
    input_ids: NotRequired[list[int]]
    text: NotRequired[str]


def sampling_params(sampling: Sampling, stop: tuple[str, ...] = ()) -> SamplingParams:
    """Return `sampling` as SGLang names it (the seed only when one is set, `stop` only when given)."""
    params: SamplingParams = {"max_new_tokens": sampling.max_tokens, "temperature": sampling.temperature,
                              "top_p": sampling.top_p}
    if stop:
        params["stop"] = list(stop)
    if sampling.seed is not None:
        params["sampling_seed"] = sampling.seed
    return params


class SGLangNativeBackend(HttpBackend):
    """Answers a turn through `/generate`, rendering the prompt with the target tokenizer's chat template, on
    the session it owns (`HttpBackend`)."""

    api = "sglang"

    def __init__(
        self,
        renderer: ChatRenderer,
        *,
        model: str | None = None,
        reasoning: Reasoning = Reasoning.KEEP,
        send_text: bool = False,
    ) -> None:
        super().__init__()
        self.renderer = renderer
        self.model = model
        self.reasoning = reasoning
        self.send_text = send_text

    def payload(self, history: list[dict[str, Any]], sampling: Sampling, tools: list[Tool] | None = None
                ) -> GenerateRequest:
        """Return the request body for `history` at `sampling`, offering `tools`."""
        body: GenerateRequest = {"sampling_params": sampling_params(sampling), "stream": False}
        how = {"tools": tools, "reasoning": self.reasoning, "tool_rendering": self.tool_rendering}
        if self.send_text:  # SGLang adds special tokens to text: a template's own BOS arrives twice
            body["text"] = self.renderer.render(history, **how)  # type: ignore[arg-type]
        else:
            body["input_ids"] = self.renderer.render_ids(history, **how)
        return body

    def tool_support_problem(self) -> str | None:
        """Return why the chat template prompts are rendered with cannot render tool use, else None."""
        return tool_support(self.renderer.tokenizer, self.renderer.chat_template)

    async def generate_turn(self, history: list[dict[str, Any]], sampling: Sampling, *,
                            endpoint: str | None = None, tools: list[Tool] | None = None) -> TurnResult:
        """Return the answer of the server at `endpoint` to the last turn of `history` (calls in its text are
        read by the runner)."""
        return await self._generate(endpoint, self.payload(history, sampling, tools))

    async def generate_ids(self, ids: list[int], sampling: Sampling, *, stop: tuple[str, ...] = (),
                           endpoint: str | None = None) -> TurnResult:
        """Continue the raw prompt `ids` (no template applied), stopping at `stop` or the model's end of turn."""
        body: GenerateRequest = {"input_ids": ids, "sampling_params": sampling_params(sampling, stop), "stream": False}
        return await self._generate(endpoint, body)

    async def _generate(self, endpoint: str | None, body: GenerateRequest) -> TurnResult:
        url = require_endpoint(self, endpoint).rstrip("/") + GENERATE_PATH
        started = time.monotonic()
        result = parse_generate(await self.post(url, body), time.monotonic() - started)
        result.model = self.model
        return result


def parse_generate(body: dict[str, Any], latency_s: float) -> TurnResult:
    """Return the TurnResult of a `/generate` answer; raise RowError when malformed, RetryableError on abort."""
    text = body.get("text")
    meta = body.get("meta_info")
    if not isinstance(text, str) or not isinstance(meta, dict):
        raise RowError(f"malformed /generate answer: need text and meta_info, got {str(body)[:200]}")
    finish = meta.get("finish_reason")
    finish_type = finish.get("type") if isinstance(finish, dict) else finish
    if finish_type == "abort":
        message = finish.get("message", "") if isinstance(finish, dict) else ""
        raise RetryableError(f"server aborted the request {message}".strip())
    reasoning, content = split_thinking(text)
    return TurnResult(
        content=content,
        reasoning=reasoning,
        finish_reason=finish_type,
        prompt_tokens=meta.get("prompt_tokens"),
        completion_tokens=meta.get("completion_tokens"),
        latency_s=float(meta.get("e2e_latency") or latency_s),
        **SpecCounters.from_meta_info(meta).model_dump(),
    )
