"""`datahunt export-checkpoint`: a run's checkpoint exported as the serving folder `train` would have written at
that step; a run's last checkpoint gives exactly its export's weights; what is not there is said in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from server.cli import app
from training.config import make_config
from training.export import load_draft
from training.trainer import train


def _run(tmp_path: Path, llama_dir: Path, data: Path) -> Path:
    run = tmp_path / "run"
    train(make_config({"data": str(data), "target": str(llama_dir), "out": str(run), "draft_vocab_size": 150,
                       "ttt_steps": 2, "batch_size": 4, "device": "cpu", "save_every": 2, "max_steps": 4}))
    return run


def test_the_last_checkpoint_exports_the_weights_the_run_exported(tmp_path: Path, llama_dir: Path,
                                                                 regenerated_data: dict[str, Path]) -> None:
    run = _run(tmp_path, llama_dir, regenerated_data["train"])
    result = CliRunner().invoke(app, ["export-checkpoint", str(run)])
    assert result.exit_code == 0, result.output
    done = json.loads(result.stdout.strip().splitlines()[-1])
    assert done["step"] == 4 and done["export"] == str(run / "export-step_0000004") and done["engines"] == ["sglang"]
    ours, theirs = (load_file(str(run / "export-step_0000004/model.safetensors")),
                    load_file(str(run / "export/model.safetensors")))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert json.loads((run / "export-step_0000004/config.json").read_text()) == \
        json.loads((run / "export/config.json").read_text())


def test_an_earlier_step_exports_its_own_weights_and_loads_for_a_moved_target(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    run = _run(tmp_path, llama_dir, regenerated_data["train"])
    moved = tmp_path / "moved_target"
    shutil.copytree(llama_dir, moved)
    out = tmp_path / "step2"
    result = CliRunner().invoke(app, ["export-checkpoint", str(run), "--step", "2", "--out", str(out),
                                      "--target", str(moved), "--engine", "both"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["engines"] == ["sglang", "vllm"]
    assert (tmp_path / "step2-vllm" / "config.json").is_file()
    two, four = load_file(str(out / "model.safetensors")), load_file(str(run / "export/model.safetensors"))
    assert not torch.equal(two["fc.weight"], four["fc.weight"])
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(moved)
    draft, _ = load_draft(out, target.get_input_embeddings().weight.detach(),
                          target_layers=target.config.num_hidden_layers)
    state = torch.load(run / "checkpoints/step_0000002/state.pt", weights_only=True)["draft"]
    assert torch.allclose(draft.fc.weight.float(), state["fc.weight"].float(), atol=1e-2)  # bf16 export of step 2


def test_what_is_not_there_is_said_in_one_line(tmp_path: Path, llama_dir: Path,
                                               regenerated_data: dict[str, Path]) -> None:
    runner = CliRunner()
    empty = runner.invoke(app, ["export-checkpoint", str(tmp_path)])
    assert empty.exit_code == 1 and "holds no checkpoint" in empty.output and "Traceback" not in empty.output
    run = _run(tmp_path, llama_dir, regenerated_data["train"])
    missing = runner.invoke(app, ["export-checkpoint", str(run), "--step", "3"])
    assert missing.exit_code == 1 and "no checkpoint of step 3 (it has: 4, 2)" in missing.output
    bad = runner.invoke(app, ["export-checkpoint", str(run), "--engine", "tgi"])
    assert bad.exit_code == 2 and "one of sglang, vllm, both" in bad.output
