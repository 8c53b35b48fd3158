"""Server introspection against recorded SGLang answers (through httpx.MockTransport) and a non-SGLang server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from inference.server_info import ServerInfoError, fetch_model_name, fetch_server_info, parse_server_info

RECORDED = Path(__file__).resolve().parent.parent / "data" / "recorded"


def _recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def _sglang_handler(*, info_path: str = "/get_server_info") -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == info_path:
            return httpx.Response(200, json=_recorded("sglang/get_server_info.json"))
        if request.url.path == "/get_model_info":
            return httpx.Response(200, json=_recorded("sglang/get_model_info.json"))
        return httpx.Response(404, json={"detail": "Not Found"})

    return httpx.MockTransport(handle)


def _fetch(transport: httpx.MockTransport, base: str = "http://sglang:30000"):
    async def run():
        async with httpx.AsyncClient(transport=transport) as client:
            return await fetch_server_info(client, base)

    return asyncio.run(run())


@pytest.mark.parametrize("info_path", ["/get_server_info", "/server_info"])
def test_reads_speculative_settings_and_accept_length(info_path: str) -> None:
    info = _fetch(_sglang_handler(info_path=info_path))
    assert info.model_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert info.speculative_algorithm == "EAGLE3"
    assert info.speculative_num_steps == 3 and info.speculative_eagle_topk == 1
    assert info.speculative_num_draft_tokens == 4
    assert info.avg_spec_accept_length == pytest.approx(3.2891)
    assert info.version == "0.5.6" and info.dtype == "bfloat16"
    assert info.context_length is None
    assert info.raw["model_info"]["is_generation"] is True


def test_accept_length_absent_before_any_speculative_step() -> None:
    raw = _recorded("sglang/get_server_info.json")
    del raw["internal_states"][0]["avg_spec_accept_length"]
    assert parse_server_info(raw).avg_spec_accept_length is None


def test_non_sglang_server_raises_a_clear_error() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(404, text="File Not Found"))
    with pytest.raises(ServerInfoError, match="not an SGLang server"):
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
