"""Server introspection against recorded SGLang answers (through httpx.MockTransport) and a non-SGLang server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from inference.server_info import (
    ServerInfoError,
    fetch_model_name,
    fetch_server_info,
    parse_server_info,
    seed_warning,
)

RECORDED = Path(__file__).resolve().parent.parent / "data" / "recorded"


def _recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def _sglang_handler(*, legacy: bool = False, asked: list[str] | None = None) -> httpx.MockTransport:
    """SGLang 0.5.23's endpoints (or, with `legacy`, only the deprecated aliases an older server has)."""
    info_path, model_path = ("/get_server_info", "/get_model_info") if legacy else ("/server_info", "/model_info")

    def handle(request: httpx.Request) -> httpx.Response:
        if asked is not None:
            asked.append(request.url.path)
        if request.url.path == info_path:
            return httpx.Response(200, json=_recorded("sglang/server_info.json"))
        if request.url.path == model_path:
            return httpx.Response(200, json=_recorded("sglang/model_info.json"))
        return httpx.Response(404, json={"detail": "Not Found"})

    return httpx.MockTransport(handle)


def _fetch(transport: httpx.MockTransport, base: str = "http://sglang:30000"):
    async def run():
        async with httpx.AsyncClient(transport=transport) as client:
            return await fetch_server_info(client, base)

    return asyncio.run(run())


def test_reads_speculative_settings_from_the_current_endpoints_only() -> None:
    asked: list[str] = []
    info = _fetch(_sglang_handler(asked=asked))
    assert asked == ["/server_info", "/model_info"]  # the deprecated aliases are never touched
    assert info.model_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert info.speculative_algorithm == "EAGLE3" and info.speculating
    assert info.speculative_draft_model_path == "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"
    assert info.speculative_num_steps == 3 and info.speculative_eagle_topk == 1
    assert info.speculative_num_draft_tokens == 4
    assert info.avg_spec_accept_length == pytest.approx(3.2891)
    assert info.version == "0.5.23" and info.dtype == "auto" and info.context_length is None
    assert info.launch_command.startswith("python3 -m sglang.launch_server --model-path")
    assert info.enable_deterministic_inference is False
    assert info.raw["model_info"]["is_generation"] is True


def test_an_older_server_is_read_through_the_deprecated_aliases() -> None:
    asked: list[str] = []
    info = _fetch(_sglang_handler(legacy=True, asked=asked))
    assert asked == ["/server_info", "/get_server_info", "/model_info", "/get_model_info"]
    assert info.speculative_algorithm == "EAGLE3" and info.raw["model_info"]["model_type"] == "llama"


def test_a_seed_is_flagged_unless_the_server_is_deterministic() -> None:
    info = parse_server_info(_recorded("sglang/server_info.json"))
    assert "--enable-deterministic-inference" in (seed_warning(info, 7) or "")
    assert seed_warning(info, None) is None and seed_warning(None, 7) is None  # no seed; not SGLang
    deterministic = parse_server_info({**_recorded("sglang/server_info.json"), "enable_deterministic_inference": True})
    assert seed_warning(deterministic, 7) is None


def test_accept_length_absent_before_any_speculative_step() -> None:
    raw = _recorded("sglang/server_info.json")
    del raw["internal_states"][0]["avg_spec_accept_length"]
    assert parse_server_info(raw).avg_spec_accept_length is None
    assert not parse_server_info({**raw, "speculative_algorithm": None}).speculating


def test_non_sglang_server_raises_a_clear_error() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(404, text="File Not Found"))
    with pytest.raises(ServerInfoError, match=r"neither an SGLang server .* nor a vLLM server"):
        _fetch(transport)


def test_unreachable_server_raises_server_info_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ServerInfoError, match="unreachable"):
        _fetch(httpx.MockTransport(refuse))


def test_garbage_answer_raises_server_info_error() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200, text="<html>proxy</html>"))
    with pytest.raises(ServerInfoError, match="did not answer JSON"):
        _fetch(transport)


def test_model_name_falls_back_to_the_openai_model_list() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=_recorded("openai/models.json"))
        return httpx.Response(404)

    async def run():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
            return await fetch_model_name(client, "http://llama:8080")

    assert asyncio.run(run()) == "meta-llama/Llama-3.1-8B-Instruct"
