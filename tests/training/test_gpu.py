"""GPU paths (skipped without CUDA): bf16 autocast training and export, and the fused TTT attention on CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from training.config import make_config
from training.draft_model import DraftConfig, Eagle3Draft
from training.trainer import train

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_attention_implementations_agree_on_cuda() -> None:
    torch.manual_seed(0)
    cfg = DraftConfig(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=300, draft_vocab_size=200, target_hidden_size=96)
    draft = Eagle3Draft(cfg).cuda()
    ids, aux = torch.randint(0, 300, (2, 64), device="cuda"), torch.randn(2, 64, 288, device="cuda")
    for a, b in zip(draft(ids, aux, 5, attention="diagonal"), draft(ids, aux, 5, attention="masked_sdpa"),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_bf16_training_on_cuda_exports_a_bf16_draft(tmp_path: Path, llama_dir: Path,
                                                    regenerated_data: dict[str, Path]) -> None:
    cfg = make_config({"data": str(regenerated_data["train"]), "target": str(llama_dir), "out": str(tmp_path),
                       "draft_vocab_size": 150, "ttt_steps": 3, "batch_size": 8, "max_steps": 20, "lr": 3e-3,
                       "device": "cuda", "export_dtype": "bfloat16"})
    result = train(cfg)
    assert result.steps == 20 and result.loss == result.loss
    assert json.loads((result.export_dir / "config.json").read_text())["torch_dtype"] == "bfloat16"
