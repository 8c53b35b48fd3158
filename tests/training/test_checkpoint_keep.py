"""Checkpoints kept small and few: the frozen embedding is not saved (it comes from the target), only the newest
`keep_checkpoints` stay, pruning touches only its own files, and a checkpoint from before still resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.checkpoints import FROZEN_KEYS, checkpoint_folders, prune_checkpoints
from training.config import make_config
from training.trainer import train


def _base(tmp_path: Path, llama_dir: Path, data: Path, **extra: object) -> dict[str, object]:
    return {"data": str(data), "target": str(llama_dir), "out": str(tmp_path / "run"), "draft_vocab_size": 150,
            "ttt_steps": 2, "batch_size": 4, "device": "cpu", **extra}


def test_only_the_newest_checkpoints_stay_and_none_holds_the_frozen_embedding(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    base = _base(tmp_path, llama_dir, regenerated_data["train"], save_every=1, keep_checkpoints=2)
    train(make_config({**base, "max_steps": 5}))
    run = tmp_path / "run"
    assert [p.name for p in checkpoint_folders(run)] == ["step_0000005", "step_0000004"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_0000004", "step_0000005"]
    state = torch.load(run / "checkpoints/step_0000005/state.pt", weights_only=True)
    assert not set(FROZEN_KEYS) & set(state["draft"]) and "fc.weight" in state["draft"]
    # keep_checkpoints may change at resume (it says nothing about the training): the run goes on, keeping 1.
    assert train(make_config({**base, "max_steps": 7, "keep_checkpoints": 1})).steps == 7
    assert [p.name for p in checkpoint_folders(run)] == ["step_0000007"]


def test_pruning_leaves_what_it_did_not_write_and_never_follows_a_link(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step in (1, 2, 3):
        folder = run / "checkpoints" / f"step_{step:07d}"
        folder.mkdir(parents=True)
        (folder / "state.pt").write_bytes(b"x")
        (folder / "train_config.json").write_text("{}")
    (run / "checkpoints/step_0000001/notes.txt").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "state.pt").write_bytes(b"keep")
    (run / "checkpoints/step_0000000").symlink_to(outside, target_is_directory=True)
    removed = prune_checkpoints(run, 1)
    assert sorted(p.name for p in removed) == ["step_0000001", "step_0000002"]
    assert not (run / "checkpoints/step_0000002").exists()
    assert sorted(p.name for p in (run / "checkpoints/step_0000001").iterdir()) == ["notes.txt"]
    assert (outside / "state.pt").read_bytes() == b"keep" and (run / "checkpoints/step_0000003/state.pt").exists()


def _two_steps(tmp_path: Path, llama_dir: Path, data: Path) -> tuple[dict[str, object], Path, dict]:
    """A run checkpointed at step 2: its settings, the checkpoint's path and its state."""
    base = _base(tmp_path, llama_dir, data, save_every=2)
    train(make_config({**base, "max_steps": 2}))
    path = tmp_path / "run/checkpoints/step_0000002/state.pt"
    return base, path, torch.load(path, weights_only=True)


def test_a_checkpoint_written_with_the_embedding_still_resumes(tmp_path: Path, llama_dir: Path,
                                                               regenerated_data: dict[str, Path]) -> None:
    base, path, state = _two_steps(tmp_path, llama_dir, regenerated_data["train"])
    state["draft"]["embed_tokens.weight"] = torch.zeros(1)  # stands in for the old layout's saved embedding
    torch.save(state, path)
    with pytest.raises(RuntimeError, match="size mismatch"):  # a wrong tensor under the frozen key still fails
        train(make_config({**base, "max_steps": 4}))
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(llama_dir)
    state["draft"]["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().clone()
    torch.save(state, path)
    assert train(make_config({**base, "max_steps": 4})).steps == 4


def test_a_checkpoint_missing_a_trained_weight_is_refused(tmp_path: Path, llama_dir: Path,
                                                          regenerated_data: dict[str, Path]) -> None:
    base, path, state = _two_steps(tmp_path, llama_dir, regenerated_data["train"])
    del state["draft"]["fc.weight"]
    torch.save(state, path)
    with pytest.raises(RuntimeError, match=r"does not fit.*fc\.weight"):
        train(make_config({**base, "max_steps": 4}))
