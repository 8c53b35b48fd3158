"""The stage's CLI: check-server against a real local server, sglang-command, eval-accept, train and its errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from realistic_configs import server_info
from sglang_stub import serve
from typer.testing import CliRunner

from server.cli import app

runner = CliRunner()


def _info(llama_dir: Path, draft: Path, **changes: Any) -> dict[str, Any]:
    info = server_info("llama31_8b_eagle3")
    info.update({"model_path": str(llama_dir), "tokenizer_path": str(llama_dir),
                 "speculative_draft_model_path": str(draft), **changes})
    return info


def _gets(info: dict[str, Any]) -> dict[str, Any]:
    return {"/server_info": info, "/model_info": {"model_path": info["model_path"],
                                                  "tokenizer_path": info["tokenizer_path"], "is_generation": True}}


def test_check_server_passes_with_the_target_config_from_model_path(llama_dir: Path, tiny_draft: Path) -> None:
    with serve(_gets(_info(llama_dir, tiny_draft))) as url:
        result = runner.invoke(app, ["check-server", url, "--draft", str(tiny_draft), "--json"])
    assert result.exit_code == 0, result.output
    assert all(c["ok"] for c in json.loads(result.stdout))


def test_check_server_fails_loudly_on_the_eagle_flag(llama_dir: Path, tiny_draft: Path) -> None:
    with serve(_gets(_info(llama_dir, tiny_draft, speculative_algorithm="EAGLE"))) as url:
        result = runner.invoke(app, ["check-server", url, "--draft", str(tiny_draft)])
    assert result.exit_code == 1
    assert "FAIL" in result.output and "3x" in result.output and "Traceback" not in result.output


def test_check_server_on_a_dead_url_is_one_line(tiny_draft: Path) -> None:
    result = runner.invoke(app, ["check-server", "http://127.0.0.1:9", "--draft", str(tiny_draft)])
    assert result.exit_code == 1 and result.output.startswith("error: ") and result.output.count("\n") == 1


@pytest.fixture(scope="module")
def target_without_weights(tmp_path_factory: pytest.TempPathFactory, llama_dir: Path) -> Path:
    """The tiny target's config.json and tokenizer files only: what eval-accept --server may read."""
    folder = tmp_path_factory.mktemp("target-config-only")
    for path in llama_dir.iterdir():
        if path.suffix not in {".safetensors", ".bin"}:
            shutil.copy(path, folder / path.name)
    assert not list(folder.glob("*.safetensors"))
    return folder


def _answer(completion: int, rounds: int | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"id": "x", "finish_reason": {"type": "length"}, "prompt_tokens": 7,
                            "completion_tokens": completion, "e2e_latency": 0.1}
    if rounds:  # SGLang writes the counters only when the answer verified at least once
        meta.update({"spec_verify_ct": rounds, "spec_accept_length": completion / rounds,
                     "spec_num_correct_drafts": completion - rounds, "spec_num_proposed_drafts": 3 * rounds})
    return {"text": "w1 w2", "meta_info": meta}


def _chat_prompts(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"conversations": [{"role": "user", "content": f"w{i} w2"}]}) + "\n"
                            for i in range(n)))
    return path


@pytest.mark.slow
def test_eval_accept_on_a_server_sends_ids_and_counts_an_answer_without_counters_as_zero_rounds(
        target_without_weights: Path, tiny_draft: Path, tmp_path: Path) -> None:
    prompts = _chat_prompts(tmp_path / "prompts.jsonl", 3)
    bodies: list[dict[str, Any]] = []
    answers = iter([_answer(30, 12), _answer(1, None), _answer(30, 12)])  # the second verified nothing

    def speculative(body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        return next(answers)

    def plain(body: dict[str, Any]) -> dict[str, Any]:
        return {"text": "w1", "meta_info": {"id": "y", "finish_reason": {"type": "length"}, "prompt_tokens": 7,
                                            "completion_tokens": 30, "e2e_latency": 0.3}}

    with serve(_gets(_info(target_without_weights, tiny_draft)), speculative) as url, serve({}, plain) as base:
        result = runner.invoke(app, ["eval-accept", "--server", url, "--baseline", base, "--draft", str(tiny_draft),
                                     "--target", str(target_without_weights), "--prompts", str(prompts),
                                     "--max-new", "30"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["accept_length"] == round(61 / 24, 4) and report["spec_verify_ct"] == 24
    assert report["answers_without_counters"] == 1 and report["prompt_format"] == "input_ids"
    assert report["spec_num_correct_drafts"] == 36 and report["draft_accept_rate"] == 0.5
    assert "baseline_tok_s" in report and "speedup" in report
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target_without_weights))
    ids = bodies[0]["input_ids"]
    assert "text" not in bodies[0] and ids.count(tokenizer.bos_token_id) == 1 and ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids) == "<bos> <|user|> w0 w2 <|end|> <|assistant|>"


def test_eval_accept_fails_only_when_no_answer_carries_the_counters(target_without_weights: Path,
                                                                    tiny_draft: Path, tmp_path: Path) -> None:
    prompts = _chat_prompts(tmp_path / "prompts.jsonl", 2)
    with serve(_gets(_info(target_without_weights, tiny_draft)), lambda body: _answer(1, None)) as url:
        result = runner.invoke(app, ["eval-accept", "--server", url, "--draft", str(tiny_draft),
                                     "--target", str(target_without_weights), "--prompts", str(prompts)])
    assert result.exit_code == 1 and "none of the 2 answers" in result.output and "Traceback" not in result.output


def test_eval_accept_sends_text_only_when_asked(target_without_weights: Path, tiny_draft: Path,
                                                tmp_path: Path) -> None:
    prompts = _chat_prompts(tmp_path / "prompts.jsonl", 1)
    bodies: list[dict[str, Any]] = []

    def speculative(body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        return _answer(8, 4)

    with serve(_gets(_info(target_without_weights, tiny_draft)), speculative) as url:
        result = runner.invoke(app, ["eval-accept", "--server", url, "--draft", str(tiny_draft), "--send-text",
                                     "--target", str(target_without_weights), "--prompts", str(prompts)])
    assert result.exit_code == 0, result.output
    assert bodies[0]["text"].startswith("<bos><|user|> w0 w2 <|end|>") and "input_ids" not in bodies[0]
    assert json.loads(result.stdout)["prompt_format"] == "text"


def test_check_server_fails_when_the_server_serves_another_draft(llama_dir: Path, tiny_draft: Path,
                                                                 tmp_path: Path) -> None:
    other = tmp_path / "other-draft"
    shutil.copytree(tiny_draft, other)
    weights = next(other.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # same config, one weight bit flipped
    weights.write_bytes(bytes(data))
    with serve(_gets(_info(llama_dir, other))) as url:
        result = runner.invoke(app, ["check-server", url, "--draft", str(tiny_draft), "--json"])
    assert result.exit_code == 1
    draft_check = next(c for c in json.loads(result.stdout) if c["check"] == "draft")
    assert not draft_check["ok"] and str(other) in draft_check["detail"]
    assert str(tiny_draft.resolve()) in draft_check["detail"] and "weights differ" in draft_check["detail"]


def test_eval_accept_refuses_to_measure_a_misconfigured_server(llama_dir: Path, tiny_draft: Path,
                                                               tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"text": "w1 w2"}) + "\n")
    with serve(_gets(_info(llama_dir, tiny_draft, speculative_algorithm="EAGLE"))) as url:
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


def test_sglang_command_checks_the_layers_against_a_local_target(tiny_draft: Path, llama_dir: Path,
                                                                 tmp_path: Path) -> None:
    result = runner.invoke(app, ["sglang-command", "--target", str(llama_dir), "--draft", str(tiny_draft)])
    assert result.exit_code == 0, result.output
    assert "captures the inputs of [1, 2, 3]" in result.output and "+1 rule always" in result.output
    twice = tmp_path / "twice"
    shutil.copytree(tiny_draft, twice)
    config = json.loads((twice / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 0, 2]
    (twice / "config.json").write_text(json.dumps(config))
    refused = runner.invoke(app, ["sglang-command", "--target", "org/model", "--draft", str(twice)])
    assert refused.exit_code == 1 and "2H features instead of 3H" in refused.output


def test_sglang_command_derives_the_algorithm_from_the_draft(tiny_draft: Path) -> None:
    result = runner.invoke(app, ["sglang-command", "--target", "org/model", "--draft", str(tiny_draft),
                                 "--steps", "5"])
    assert result.exit_code == 0, result.output
    line = result.stdout.strip().splitlines()[-1]
    assert "--speculative-algorithm EAGLE3" in line and "--speculative-num-draft-tokens 6" in line
    # sglang is not installed here: the line names no Python of this environment, and says where to run it.
    assert line.startswith("python -m sglang.launch_server ")
    assert "sglang is not installed in this Python" in result.stdout
    assert f"next: once it serves, `datahunt check-server http://127.0.0.1:30000 --draft {tiny_draft}`" in result.stderr
    # A float32 draft and a target known only by Hub id: no --dtype (the engine's own), never float32.
    assert "--context-length 512" in line and "--dtype" not in line
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
    lines = result.stdout.strip().splitlines()  # one screen a person reads, not a JSON dict
    assert lines[0].startswith("trained 2 steps in ") and lines[1].startswith("loss ") and " → " in lines[1]
    assert lines[2].startswith("draft accuracy per TTT step: ") and len(lines) <= 8
    assert f"export: {tmp_path / 'export'}" in result.stdout and (tmp_path / "export" / "config.json").is_file()
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2]  # --log-every 50 is longer than the run: a point per step


def test_check_template_prints_the_supervised_spans(llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    result = runner.invoke(app, ["check-template", "--target", str(llama_dir), "--data",
                                 str(regenerated_data["heldout"])])
    assert result.exit_code == 0, result.output
    assert "supervised span 1:" in result.output and "ids match apply_chat_template" in result.output


def test_train_by_token_budget_logs_progress_then_eval_accept_reports_a_speedup(
    tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]
) -> None:
    """The local loop from the command line: train writes its log and curve, eval-accept says what it measured."""
    out = tmp_path / "run"
    trained = runner.invoke(app, ["train", "--data", str(regenerated_data["train"]), "--target", str(llama_dir),
                                  "--out", str(out), "--steps", "30", "--batch-tokens", "512", "--log-every", "10",
                                  "--draft-vocab-size", "150", "--ttt-steps", "3", "--lr", "3e-3",
                                  "--device", "cpu", "--json"])
    assert trained.exit_code == 0, trained.output
    summary = json.loads(trained.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 30 and summary["tokens"] > 0 and summary["tokens_per_s"] > 0
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().split("\n") if line]
    assert [r["step"] for r in log] == [1, 10, 20, 30] and all(len(r["step_accuracies"]) == 3 for r in log)
    assert (out / "loss_curve.png").stat().st_size > 1000
    prompts = tmp_path / "prompts.jsonl"
    rows = [json.loads(line) for line in regenerated_data["heldout"].read_text().split("\n") if line][:3]
    prompts.write_text("".join(json.dumps({"conversations": r["conversations"][:1]}) + "\n" for r in rows))
    evaluated = runner.invoke(app, ["eval-accept", "--draft", summary["export"], "--target", str(llama_dir),
                                    "--prompts", str(prompts), "--steps", "3", "--max-new", "12"])
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert report["prompts"] == 3 and report["identical_to_target_greedy"] is True
    assert report["speedup"] > 0 and report["baseline_tok_s"] > 0 and report["accept_length"] >= 1.0
    assert "tokens per round" in evaluated.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_train_on_cuda_without_a_gpu_is_one_line(tmp_path: Path, llama_dir: Path,
                                                 regenerated_data: dict[str, Path]) -> None:
    result = runner.invoke(app, ["train", "--data", str(regenerated_data["train"]), "--target", str(llama_dir),
                                 "--out", str(tmp_path / "run"), "--steps", "2", "--device", "cuda"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        "error: device cuda: no CUDA device is available here (use --device cpu or auto)")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_eval_accept_on_prompts_that_are_not_utf8_is_one_line(tmp_path: Path, llama_dir: Path,
                                                              tiny_draft: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')  # Latin-1, not UTF-8, on line 2
    result = runner.invoke(app, ["eval-accept", "--draft", str(tiny_draft), "--target", str(llama_dir),
                                 "--prompts", str(prompts)])
    assert result.exit_code in (1, 2) and isinstance(result.exception, SystemExit), result.output  # no traceback
    assert result.output.strip().splitlines()[-1] == f"error: {prompts}:2: not UTF-8 (byte 0xe9 at byte 14 of the line)"
