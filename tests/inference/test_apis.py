"""Both APIs against recorded real-shaped answers: parsing, reasoning handling, error classes, payloads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from regen_fake_server import FakeServer

from inference.chat_template import ChatRenderer, TemplateError
from inference.generation import (
    Reasoning,
    RetryableError,
    RowError,
    Sampling,
    new_session,
    post_json,
    strip_thinking,
)
from inference.openai_api import OpenAIChatBackend, api_base, parse_chat_completion
from inference.sglang_api import SGLangNativeBackend, parse_generate

RECORDED = Path(__file__).resolve().parent.parent / "data" / "recorded"
HISTORY = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]


def _recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def test_openai_answer_with_usage_and_reasoning_content() -> None:
    plain = parse_chat_completion(_recorded("openai/chat_completions.json"), 0.5)
    assert plain.content == "The capital of France is Paris." and plain.reasoning is None
    assert (plain.prompt_tokens, plain.completion_tokens, plain.finish_reason) == (42, 8, "stop")
    thinking = parse_chat_completion(_recorded("openai/chat_completions_reasoning.json"), 0.5)
    assert thinking.training_text(Reasoning.KEEP).startswith("<think>\nThe user wants 2+2")
    assert thinking.training_text(Reasoning.KEEP).endswith("2 + 2 = 4.")
    assert thinking.training_text(Reasoning.DROP) == "2 + 2 = 4."
    llama = parse_chat_completion(_recorded("openai/llamacpp_chat_completions.json"), 0.5)
    assert llama.finish_reason == "length" and llama.completion_tokens == 16


def test_inline_think_markers_are_split_out() -> None:
    body = _recorded("openai/chat_completions.json")
    body["choices"][0]["message"]["content"] = "<think>hmm</think>\n\nParis."
    result = parse_chat_completion(body, 0.1)
    assert result.reasoning == "hmm" and result.content == "Paris."
    assert strip_thinking("<think>unclosed and cut off") == ""


def test_malformed_chat_completion_is_a_row_error() -> None:
    with pytest.raises(RowError, match="no choices"):
        parse_chat_completion({"choices": []}, 0.1)


def test_openai_payload_carries_sampling_and_disables_thinking() -> None:
    backend = OpenAIChatBackend(model="m", reasoning=Reasoning.DISABLE)
    body = backend.payload(HISTORY, Sampling(temperature=0.0, top_p=1.0, max_tokens=64, seed=7))
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64 and body["seed"] == 7
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "seed" not in OpenAIChatBackend().payload(HISTORY, Sampling())
    assert api_base("http://h:1/v1/") == "http://h:1"


def test_sglang_generate_meta_info_and_abort() -> None:
    result = parse_generate(_recorded("sglang/generate.json"), 9.0)
    assert result.finish_reason == "stop" and result.spec_verify_ct == 5
    assert (result.spec_num_correct_drafts, result.spec_num_proposed_drafts) == (12, 15)
    assert result.spec_accept_length == pytest.approx(3.4)
    quiet = parse_generate(_recorded("sglang/generate_no_counters.json"), 1.0)  # verified nothing: no counters
    assert quiet.completion_tokens == 1 and quiet.spec_verify_ct is None and quiet.spec_num_proposed_drafts is None
    older = parse_generate({"text": "x", "meta_info": {"spec_verify_ct": 2, "spec_accepted_drafts": 3,
                                                       "spec_proposed_drafts": 6}}, 0.1)
    assert (older.spec_num_correct_drafts, older.spec_num_proposed_drafts) == (3, 6)
    assert (result.prompt_tokens, result.completion_tokens) == (42, 17)
    assert result.latency_s == pytest.approx(0.0913)
    cut = parse_generate(_recorded("sglang/generate_length.json"), 1.0)
    assert cut.finish_reason == "length" and cut.reasoning.startswith("The user asks") and cut.content == ""
    with pytest.raises(RetryableError, match="aborted"):
        parse_generate({"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": "oom"}}}, 0.1)
    with pytest.raises(RowError, match="malformed"):
        parse_generate({"text": "x"}, 0.1)


def test_sglang_payload_sends_ids_rendered_once_by_default(tiny_tokenizer_dir: Path) -> None:
    renderer = ChatRenderer.load(tiny_tokenizer_dir)
    body = SGLangNativeBackend(renderer).payload(HISTORY, Sampling(max_tokens=32, seed=3))
    assert "text" not in body
    assert body["sampling_params"] == {"max_new_tokens": 32, "temperature": 0.7, "top_p": 0.95, "sampling_seed": 3}
    vocab = renderer.tokenizer.get_vocab()
    assert body["input_ids"][0] == vocab["<|system|>"] and body["input_ids"][-1] == vocab["<|assistant|>"]
    assert vocab["hello"] in body["input_ids"]
    text = SGLangNativeBackend(renderer, reasoning=Reasoning.DISABLE, send_text=True).payload(HISTORY, Sampling())
    assert text["text"] == "<|system|>be brief<|end|><|user|>hello world<|end|><|assistant|>NOTHINK"
    assert "input_ids" not in text


def test_ids_carry_one_bos_where_text_would_reach_sglang_with_two(bos_tokenizer_dir: Path) -> None:
    renderer = ChatRenderer.load(bos_tokenizer_dir)
    ids = SGLangNativeBackend(renderer).payload(HISTORY, Sampling())["input_ids"]
    assert ids[0] == 1 and ids.count(1) == 1
    text = SGLangNativeBackend(renderer, send_text=True).payload(HISTORY, Sampling())["text"]
    as_sglang_tokenizes_it = renderer.tokenizer(text, add_special_tokens=True)["input_ids"]
    assert as_sglang_tokenizes_it[:2] == [1, 1]  # the trap the default avoids


def test_tokenizer_without_template_is_refused(tiny_tokenizer_dir: Path) -> None:
    renderer = ChatRenderer.load(tiny_tokenizer_dir)
    renderer.tokenizer.chat_template = None
    with pytest.raises(TemplateError, match="no chat template"):
        ChatRenderer(renderer.tokenizer)


def _post(url: str) -> dict:
    async def run() -> dict:
        async with new_session(connections=2, connect_timeout_s=1.0, request_timeout_s=0.5) as session:
            return await post_json(session, url, {"messages": [{"role": "user", "content": "x"}]})

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("fault", "error", "status"),
    [("429", RetryableError, 429), ("500", RetryableError, 500), ("400", RowError, 400),
     ("garbage", RowError, 200), ("drop", RetryableError, None), ("timeout", RetryableError, None)],
)
def test_faults_map_to_the_retry_policy(fault: str, error: type, status: int | None) -> None:
    server = FakeServer(script=[fault]).start()
    try:
        with pytest.raises(error) as info:
            _post(server.url + "/v1/chat/completions")
        assert _post(server.url + "/v1/chat/completions")["choices"][0]["message"]["content"]  # next one answers
    finally:
        server.stop()
    assert info.value.status_code == status
    if isinstance(info.value, RetryableError):
        assert info.value.endpoint_fault is False


def test_connection_refused_is_an_endpoint_fault() -> None:
    server = FakeServer().start()
    url = server.url
    server.stop()
    with pytest.raises(RetryableError) as refused:
        _post(url + "/v1/chat/completions")
    assert refused.value.endpoint_fault is True and "cannot connect" in str(refused.value)


TOOL_HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "c1"},
]
TOOL_SCHEMA = [{"type": "function", "function": {"name": "weather", "description": None, "parameters": None}}]


def test_openai_payload_offers_tools_and_sends_calls_structured_in_the_reasoning_mode() -> None:
    from core.chat_render import ToolRendering

    body = OpenAIChatBackend(model="m", reasoning=Reasoning.SERVED_ON).payload(TOOL_HISTORY, Sampling(), TOOL_SCHEMA)
    assert body["messages"] == TOOL_HISTORY and body["tools"] == TOOL_SCHEMA
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert "chat_template_kwargs" not in OpenAIChatBackend(model="m").payload(TOOL_HISTORY, Sampling())
    text = OpenAIChatBackend(model="m", tool_rendering=ToolRendering.TEXT).payload(TOOL_HISTORY, Sampling(),
                                                                                 TOOL_SCHEMA)
    assert "tools" not in text and [m["role"] for m in text["messages"]] == ["system", "user", "assistant", "user"]
    assert text["messages"][2]["content"].startswith("<tool_call>\n{\"arguments\": {\"city\": \"Paris\"}")
    assert text["messages"][3]["content"] == '<tool_response>\n{"temp": 21}\n</tool_response>'


def test_a_servers_structured_tool_call_is_kept_structured() -> None:
    """A real vLLM 0.32 (CPU build) answer, its message rewritten to what the hermes parser returns for a call
    (content null, `tool_calls` set, as `vllm/tool_parsers/hermes_tool_parser.py` builds it): SmolLM2-135M, the
    only target here, does not call tools on its own, so no unedited answer with a call could be recorded."""
    result = parse_chat_completion(_recorded("vllm/chat_completion_tool_call.json"), 0.2)
    assert result.content == "" and result.finish_reason == "tool_calls"
    assert result.tool_calls == [{"id": "chatcmpl-tool-8f1d2c3b4a5e6f70", "type": "function",
                                  "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]
