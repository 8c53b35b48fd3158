"""Fixtures of the training tests: one thread for torch, a tiny saved Llama target, its regenerated data, and a
random draft exported for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import make_llama, make_tokenizer, regenerate


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> None:
    """Tiny models on a shared 2-core machine run faster on one thread than fighting over two."""
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return make_tokenizer()


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """A saved tiny Llama target with its tokenizer."""
    folder = tmp_path_factory.mktemp("llama")
    make_llama(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def regenerated_data(tmp_path_factory: pytest.TempPathFactory, llama_dir: Path, tokenizer: Any) -> dict[str, Path]:
    """Train (300 rows) and held-out (12 rows) regenerated JSONL files for the tiny Llama."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(llama_dir).eval()
    folder = tmp_path_factory.mktemp("regen")
    files = {}
    for name, n, seed in (("train", 300, 1), ("heldout", 12, 2)):
        rows = regenerate(model, tokenizer, n, new_tokens=24, seed=seed)
        files[name] = folder / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return files


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory, llama_dir: Path, regenerated_data: dict[str, Path]) -> Any:
    """A draft trained briefly (150 steps, batch 8, 4 TTT steps) on the regenerated rows of the tiny Llama."""
    from training.config import make_config
    from training.trainer import train

    cfg = make_config({"data": str(regenerated_data["train"]), "target": str(llama_dir),
                       "out": str(tmp_path_factory.mktemp("run")), "draft_vocab_size": 150, "ttt_steps": 4,
                       "batch_size": 8, "max_steps": 150, "lr": 3e-3, "device": "cpu", "save_every": 100})
    return cfg, train(cfg)


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory: pytest.TempPathFactory, llama_dir: Path) -> Path:
    """A random draft exported for the tiny Llama target (hidden 64, 4 layers, fp32), on three distinct layers."""
    from inference.decoding.draft_model import DraftConfig, Eagle3Draft
    from inference.decoding.hidden_states import AuxLayers
    from training.export import export_draft

    config = json.loads((llama_dir / "config.json").read_text())
    torch.manual_seed(0)
    draft = Eagle3Draft(DraftConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=config["vocab_size"],
                                    draft_vocab_size=config["vocab_size"], target_hidden_size=64,
                                    max_position_embeddings=512))
    draft.t2d.fill_(True)
    return export_draft(draft, AuxLayers((1, 2, 3), "input"), tmp_path_factory.mktemp("draft"), dtype="float32")
