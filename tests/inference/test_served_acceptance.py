"""inference.served_acceptance through httpx's mock transport: the greedy bodies sent, the counters read back."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from core.spec_counters import VllmSpecCounters
from inference.errors import InferenceError
from inference.served_acceptance import ServerEvalError, evaluate_server, evaluate_vllm


def _recording(bodies: list[tuple[str, dict[str, Any]]], answer: dict[str, Any]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append((request.url.path, json.loads(request.content)))
        return httpx.Response(200, json=answer)

    return httpx.MockTransport(handle)


def test_sglang_gets_the_greedy_generate_body_and_counters_make_the_accept_length() -> None:
    bodies: list[tuple[str, dict[str, Any]]] = []
    meta = {"completion_tokens": 12, "spec_verify_ct": 4, "spec_num_correct_drafts": 8, "spec_num_proposed_drafts": 12}
    report = evaluate_server("http://sglang/", [[1, 2, 3], "text prompt"], max_new_tokens=16,
                             transport=_recording(bodies, {"text": "x", "meta_info": meta}))
    assert [path for path, _ in bodies] == ["/generate", "/generate"]
    assert bodies[0][1] == {"sampling_params": {"max_new_tokens": 16, "temperature": 0.0, "top_p": 1.0},
                            "stream": False, "input_ids": [1, 2, 3]}
    assert bodies[1][1]["text"] == "text prompt" and "input_ids" not in bodies[1][1]
    assert report["accept_length"] == 3.0 and report["prompt_format"] == "text"
    assert report["draft_accept_rate"] == round(16 / 24, 4)


def test_vllm_counters_are_differenced_around_the_run() -> None:
    bodies: list[tuple[str, dict[str, Any]]] = []
    readings = iter([VllmSpecCounters(10, 30, 12, (6, 4, 2)), VllmSpecCounters(14, 42, 20, (10, 6, 4))])
    report = evaluate_vllm("http://vllm", "m", [[5, 6]], lambda: next(readings), max_new_tokens=8,
                           transport=_recording(bodies, {"usage": {"completion_tokens": 12}}))
    assert bodies == [("/v1/completions", {"model": "m", "prompt": [5, 6], "max_tokens": 8, "temperature": 0.0})]
    assert report["num_drafts"] == 4 and report["accept_length"] == 3.0
    assert report["per_position_accept"] == [1.0, 0.5, 1.0]  # 4 of 4 drafts, then 2 of those 4, then 2 of 2


def test_a_server_that_cannot_be_measured_is_an_inference_error() -> None:
    with pytest.raises(ServerEvalError, match="no speculative algorithm") as raised:
        evaluate_server("http://sglang", [[1]], speculating=False)
    assert isinstance(raised.value, InferenceError)
    with pytest.raises(ServerEvalError, match="no vllm:spec_decode counters"):
        evaluate_vllm("http://vllm", "m", [[1]], lambda: None)
