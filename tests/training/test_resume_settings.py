"""A resumed run explains itself: other settings than the checkpoint's are refused (or, forced, applied and
said), a finished run says so instead of printing a NaN loss, and a folder given as --data is looked into."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from server.cli import app
from training.config import make_config
from training.resume_check import ResumeMismatchError
from training.trainer import train


def _base(tmp_path: Path, llama_dir: Path, data: Path) -> dict[str, object]:
    return {"data": str(data), "target": str(llama_dir), "out": str(tmp_path / "run"), "draft_vocab_size": 150,
            "ttt_steps": 2, "batch_size": 4, "device": "cpu", "save_every": 2, "max_steps": 2}


def test_a_resume_with_another_lr_is_refused_naming_it_and_forced_applies_it(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    base = _base(tmp_path, llama_dir, regenerated_data["train"])
    train(make_config(base))
    with pytest.raises(ResumeMismatchError, match=r"lr 0.0001 → 0.003.*--force-resume"):
        train(make_config({**base, "max_steps": 4, "lr": 3e-3}))
    assert not (tmp_path / "run" / "checkpoints" / "step_0000004").exists()  # refused before any step

    forced = train(make_config({**base, "max_steps": 4, "lr": 3e-3, "force_resume": True}))
    assert forced.steps == 4 and set(forced.changed) == {"lr"}
    state = torch.load(tmp_path / "run/checkpoints/step_0000004/state.pt", weights_only=True)
    assert state["scheduler"]["base_lrs"] == [3e-3]  # the new lr, not the checkpoint's 1e-4


def test_a_shape_change_cannot_be_forced_and_run_length_may_change(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    base = _base(tmp_path, llama_dir, regenerated_data["train"])
    train(make_config(base))
    with pytest.raises(ResumeMismatchError, match=r"draft_vocab_size 150 → 120.*another --out"):
        train(make_config({**base, "max_steps": 4, "draft_vocab_size": 120, "force_resume": True}))
    longer = train(make_config({**base, "max_steps": 3, "log_every": 1, "save_every": 5}))
    assert longer.steps == 3 and not longer.changed


def test_the_cli_refuses_a_new_lr_in_one_line_and_a_finished_run_says_where_its_export_is(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    runner = CliRunner()
    run = tmp_path / "run"
    # --data given as a folder: the regen run's regenerated.jsonl inside it is read
    folder = tmp_path / "regen_run"
    folder.mkdir()
    shutil.copy(regenerated_data["train"], folder / "regenerated.jsonl")
    args = ["train", "--data", str(folder), "--target", str(llama_dir), "--out", str(run), "--steps", "2",
            "--draft-vocab-size", "150", "--ttt-steps", "2", "--batch-size", "4", "--device", "cpu"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "next: datahunt eval-accept --draft" in first.output and "sglang-command" in first.output

    again = runner.invoke(app, [*args, "--json"])
    assert again.exit_code == 0, again.output
    assert f"already finished at step 2; export is {run / 'export'}" in again.output
    assert "NaN" not in again.output
    summary = json.loads([line for line in again.output.splitlines() if line.startswith("{")][-1])
    assert summary["steps"] == 2 and isinstance(summary["loss"], float)

    refused = runner.invoke(app, [*args, "--lr", "0.01"])
    assert refused.exit_code == 1
    error = [line for line in refused.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "lr 0.0001 → 0.01" in error[0] and "--force-resume" in error[0]
    assert "Traceback" not in refused.output

    empty = tmp_path / "empty"
    empty.mkdir()
    bad = runner.invoke(app, [*args[:2], str(empty), *args[3:4], str(llama_dir), "--out", str(tmp_path / "r2")])
    assert bad.exit_code == 1
    assert "is a folder with no regenerated.jsonl or samples.jsonl" in bad.output
    assert "does not exist" not in bad.output


def test_a_cpu_run_for_a_bfloat16_target_exports_bfloat16_and_the_launch_line_says_so(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    target = tmp_path / "bf16_target"
    shutil.copytree(llama_dir, target)
    config = json.loads((target / "config.json").read_text())
    config["dtype"] = "bfloat16"
    config.pop("torch_dtype", None)
    (target / "config.json").write_text(json.dumps(config))
    result = train(make_config({**_base(tmp_path, target, regenerated_data["heldout"]), "max_steps": 1,
                                 "aux_layer_ids": [1, 2, 3]}))
    assert json.loads((result.export_dir / "config.json").read_text())["torch_dtype"] == "bfloat16"
    line = CliRunner().invoke(app, ["sglang-command", "--target", str(target), "--draft", str(result.export_dir)])
    assert line.exit_code == 0 and "--dtype bfloat16" in line.stdout.splitlines()[-1], line.output
