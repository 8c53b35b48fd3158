"""The stage's CLI: check-server against a real local server, sglang-command, eval-accept, train and its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from realistic_configs import server_info
from sglang_stub import serve
from typer.testing import CliRunner

from server.cli import app
from training.draft_model import DraftConfig, Eagle3Draft
from training.export import export_draft
from training.hidden_states import default_aux_layers

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_draft(tmp_path_factory: pytest.TempPathFactory, llama_dir: Path) -> Path:
    """A random draft exported for the tiny Llama target (hidden 64, 4 layers, fp32)."""
    config = json.loads((llama_dir / "config.json").read_text())
    torch.manual_seed(0)
    draft = Eagle3Draft(DraftConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=config["vocab_size"],
                                    draft_vocab_size=config["vocab_size"], target_hidden_size=64,
                                    max_position_embeddings=512))
    draft.t2d.fill_(True)
    folder = tmp_path_factory.mktemp("draft")
    return export_draft(draft, default_aux_layers(4), folder, dtype="float32")


def _info(llama_dir: Path, **changes: Any) -> dict[str, Any]:
    info = server_info("llama31_8b_eagle3")
    info.update({"model_path": str(llama_dir), "tokenizer_path": str(llama_dir), **changes})
    return info


def _gets(info: dict[str, Any]) -> dict[str, Any]:
    return {"/get_server_info": info, "/get_model_info": {"model_path": info["model_path"],
                                                          "tokenizer_path": info["tokenizer_path"],
                                                          "is_generation": True}}


def test_check_server_passes_with_the_target_config_from_model_path(llama_dir: Path, tiny_draft: Path) -> None:
    with serve(_gets(_info(llama_dir))) as url:
        result = runner.invoke(app, ["check-server", url, "--draft", str(tiny_draft), "--json"])
    assert result.exit_code == 0, result.output
    assert all(c["ok"] for c in json.loads(result.stdout))


def test_check_server_fails_loudly_on_the_eagle_flag(llama_dir: Path, tiny_draft: Path) -> None:
    with serve(_gets(_info(llama_dir, speculative_algorithm="EAGLE"))) as url:
        result = runner.invoke(app, ["check-server", url, "--draft", str(tiny_draft)])
    assert result.exit_code == 1
    assert "FAIL" in result.output and "3x" in result.output and "Traceback" not in result.output


def test_check_server_on_a_dead_url_is_one_line(tiny_draft: Path) -> None:
    result = runner.invoke(app, ["check-server", "http://127.0.0.1:9", "--draft", str(tiny_draft)])
    assert result.exit_code == 1 and result.output.startswith("error: ") and result.output.count("\n") == 1


def test_eval_accept_on_a_server_reports_tokens_over_verify_rounds(llama_dir: Path, tiny_draft: Path,
                                                                   tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"conversations": [{"role": "user", "content": f"w{i} w2"}]}) + "\n"
                               for i in range(3)))
    seen: list[str] = []

    def speculative(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body["text"])
        return {"text": "w1 w2", "meta_info": {"id": "x", "finish_reason": {"type": "length"}, "prompt_tokens": 7,
                                               "completion_tokens": 30, "spec_verify_ct": 12, "e2e_latency": 0.1}}

    def plain(body: dict[str, Any]) -> dict[str, Any]:
        return {"text": "w1", "meta_info": {"id": "y", "finish_reason": {"type": "length"}, "prompt_tokens": 7,
                                            "completion_tokens": 30, "e2e_latency": 0.3}}

    with serve(_gets(_info(llama_dir)), speculative) as url, serve({}, plain) as base:
        result = runner.invoke(app, ["eval-accept", "--server", url, "--baseline", base, "--draft", str(tiny_draft),
                                     "--target", str(llama_dir), "--prompts", str(prompts), "--max-new", "30"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["accept_length"] == 2.5 and report["spec_verify_ct"] == 36
    assert "baseline_tok_s" in report and "speedup" in report
    assert seen[0].startswith("<bos><|user|> w0 w2 <|end|>") and seen[0].endswith("<|assistant|> ")


def test_eval_accept_refuses_to_measure_a_misconfigured_server(llama_dir: Path, tiny_draft: Path,
                                                               tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"text": "w1 w2"}) + "\n")
    with serve(_gets(_info(llama_dir, speculative_algorithm="EAGLE"))) as url:
        result = runner.invoke(app, ["eval-accept", "--server", url, "--draft", str(tiny_draft),
                                     "--prompts", str(prompts)])
    assert result.exit_code == 1 and "preflight failed" in result.output


def test_eval_accept_locally_checks_identity(llama_dir: Path, tiny_draft: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"conversations": [{"role": "user", "content": "w3 w4"}]}) + "\n")
    result = runner.invoke(app, ["eval-accept", "--draft", str(tiny_draft), "--target", str(llama_dir),
                                 "--prompts", str(prompts), "--steps", "3", "--max-new", "8"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["identical_to_target_greedy"] is True and report["accept_length"] >= 1.0


def test_sglang_command_derives_the_algorithm_from_the_draft(tiny_draft: Path) -> None:
    result = runner.invoke(app, ["sglang-command", "--target", "org/model", "--draft", str(tiny_draft),
                                 "--steps", "5"])
    assert result.exit_code == 0, result.output
    line = result.output.strip().splitlines()[-1]
    assert "--speculative-algorithm EAGLE3" in line and "--speculative-num-draft-tokens 6" in line
    assert "--context-length 512" in line and "--dtype float32" in line
    bad = runner.invoke(app, ["sglang-command", "--target", "m", "--draft", str(tiny_draft), "--context-length",
                              "4096"])
    assert bad.exit_code == 1 and "exceeds the draft's max_position_embeddings 512" in bad.output


def test_train_rejects_an_unknown_config_key_in_one_line(tmp_path: Path, llama_dir: Path) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"data": "d.jsonl", "target": str(llama_dir), "out": str(tmp_path), "lr_max": 1}))
    result = runner.invoke(app, ["train", "--config", str(config)])
    assert result.exit_code == 1
    assert result.output.startswith("error: invalid training config: lr_max") and "Traceback" not in result.output


def test_train_on_missing_data_is_one_line(tmp_path: Path, llama_dir: Path) -> None:
    result = runner.invoke(app, ["train", "--data", str(tmp_path / "nope.jsonl"), "--target", str(llama_dir),
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 1 and "does not exist" in result.output


def test_train_from_the_cli_exports_a_draft(tmp_path: Path, llama_dir: Path,
                                            regenerated_data: dict[str, Path]) -> None:
    result = runner.invoke(app, ["train", "--data", str(regenerated_data["heldout"]), "--target", str(llama_dir),
                                 "--out", str(tmp_path), "--steps", "2", "--ttt-steps", "2",
                                 "--draft-vocab-size", "64", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2 and (tmp_path / "export" / "config.json").is_file()


def test_check_template_prints_the_supervised_spans(llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    result = runner.invoke(app, ["check-template", "--target", str(llama_dir), "--data",
                                 str(regenerated_data["heldout"])])
    assert result.exit_code == 0, result.output
    assert "supervised span 1:" in result.output and "ids match apply_chat_template" in result.output
