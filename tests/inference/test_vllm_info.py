"""vLLM told apart from SGLang, its settings normalised, and its speculative counters read from `/metrics`.

The answers are recorded from a real vLLM 0.32.0 CPU server (SmolLM2-135M-Instruct with an EAGLE-3 draft of
five tokens a round, after six greedy prompts): `/version`, `/v1/models`, `/metrics`, and the dev-mode
`/server_info?config_format=json` trimmed to the fields read. They are served through httpx's mock transport.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from core.server_info import ServerInfo
from core.spec_counters import VllmSpecCounters
from inference.server_info import ServerInfoError, fetch_server_info, fetch_vllm_metrics
from inference.vllm_info import MetricsError, parse_metrics, spec_counters

RECORDED = Path(__file__).parents[1] / "data" / "recorded" / "vllm"


def _answers(dev_mode: bool, metrics: str | None = None) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/version":
            return httpx.Response(200, text=(RECORDED / "version.json").read_text())
        if path == "/v1/models":
            return httpx.Response(200, text=(RECORDED / "models.json").read_text())
        if path == "/metrics":
            return httpx.Response(200, text=metrics or (RECORDED / "metrics_after_6_prompts.txt").read_text())
        if path == "/server_info" and dev_mode:
            return httpx.Response(200, text=(RECORDED / "server_info_dev_mode.json").read_text())
        return httpx.Response(404, json={"detail": "Not Found"})

    return httpx.MockTransport(handle)


def _info(transport: httpx.MockTransport) -> ServerInfo:
    async def run() -> ServerInfo:
        async with httpx.AsyncClient(transport=transport) as client:
            return await fetch_server_info(client, "http://vllm:8000")

    return asyncio.run(run())


def test_a_dev_mode_vllm_server_reports_its_draft_method_and_dtype() -> None:
    info = _info(_answers(dev_mode=True))
    assert info.engine == "vllm" and info.version == "0.32.0"
    assert info.speculative_algorithm == "EAGLE3" and info.speculating
    assert info.speculative_draft_model_path == "/srv/models/draft-vllm"
    assert (info.speculative_num_steps, info.speculative_num_draft_tokens) == (5, 6)
    assert info.model_path == "/srv/models/smollm2" and info.context_length == 2048 and info.dtype == "bfloat16"


def test_without_dev_mode_the_counters_still_say_it_speculates_and_how_far() -> None:
    info = _info(_answers(dev_mode=False))
    assert info.engine == "vllm" and info.speculating
    assert info.speculative_algorithm == "speculating" and info.speculative_num_steps == 5  # five positions
    assert info.speculative_draft_model_path is None and info.raw["dev_mode"] is False


def test_a_vllm_server_without_speculation_is_vllm_but_not_speculating() -> None:
    plain = "\n".join(line for line in (RECORDED / "metrics_after_6_prompts.txt").read_text().splitlines()
                      if "spec_decode" not in line) + "\n"
    info = _info(_answers(dev_mode=False, metrics=plain))
    assert info.engine == "vllm" and not info.speculating and info.speculative_num_steps is None


def test_a_server_that_is_neither_engine_is_refused_naming_both() -> None:
    with pytest.raises(ServerInfoError, match=r"neither an SGLang server .* nor a vLLM server"):
        _info(httpx.MockTransport(lambda r: httpx.Response(404, text="File Not Found")))
    prometheus_only = httpx.MockTransport(lambda r: httpx.Response(
        200, text="# TYPE up gauge\nup 1\n") if r.url.path == "/metrics" else httpx.Response(404))
    with pytest.raises(ServerInfoError, match="nor a vLLM server"):
        _info(prometheus_only)
    # llama.cpp answers /metrics with a 501 unless started with --metrics: still "neither", not that HTTP error.
    llama_like = httpx.MockTransport(lambda r: httpx.Response(
        501, json={"error": {"code": 501, "message": "This server does not support metrics endpoint."}})
        if r.url.path == "/metrics" else httpx.Response(404, text="File Not Found"))
    with pytest.raises(ServerInfoError, match=r"neither an SGLang server .* nor a vLLM server"):
        _info(llama_like)


def test_counters_are_read_summed_over_engines_and_differenced_around_a_run() -> None:
    counters = spec_counters(parse_metrics((RECORDED / "metrics_after_6_prompts.txt").read_text()))
    assert counters == VllmSpecCounters(drafts=313, draft_tokens=1565, accepted=65, per_position=(61, 4, 0, 0, 0))
    assert counters.accept_length == pytest.approx(1 + 65 / 313)
    assert counters.per_position_accept() == [round(61 / 313, 4), round(4 / 61, 4), 0.0, 0.0, 0.0]
    two_engines = ('vllm:spec_decode_num_drafts_total{engine="0"} 10\nvllm:spec_decode_num_drafts_total{engine="1"} 5\n'
                   'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 12\n')
    assert spec_counters(parse_metrics(two_engines)) == VllmSpecCounters(drafts=15, accepted=12)
    run = counters - VllmSpecCounters(drafts=300, draft_tokens=1500, accepted=60, per_position=(58, 2, 0, 0, 0))
    assert run == VllmSpecCounters(13, 65, 5, (3, 2, 0, 0, 0)) and run.accept_length == pytest.approx(18 / 13)
    assert VllmSpecCounters().accept_length is None


def test_metrics_that_are_not_prometheus_text_are_one_clear_error() -> None:
    with pytest.raises(MetricsError, match="not Prometheus text"):
        parse_metrics("vllm:spec_decode_num_drafts_total{engine=\"0\" 3\n")

    async def run() -> None:
        transport = httpx.MockTransport(lambda r: httpx.Response(200, text="<html>{not metrics"))
        async with httpx.AsyncClient(transport=transport) as client:
            await fetch_vllm_metrics(client, "http://vllm:8000")

    with pytest.raises(ServerInfoError, match="not Prometheus text"):
        asyncio.run(run())


def test_recorded_answers_are_real_shaped() -> None:
    models = json.loads((RECORDED / "models.json").read_text())
    assert models["data"][0]["owned_by"] == "vllm" and models["data"][0]["max_model_len"] == 2048
