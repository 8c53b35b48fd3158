"""Realistic target and draft configurations for the preflight tests (no weights: shapes and vocab maps only).

Llama-3.1-8B-like: hidden 4096, 32 layers, vocab 128256, a 32000-token draft vocab, 131072 positions, bf16.
Kimi-K2-like: hidden 7168, 61 layers (aux inputs of [2, 30, 58]), vocab 163840, 131072 positions, bf16.
Drafts are described exactly as `training.export` writes them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from core.server_info import ServerInfo
from inference.decoding.draft_model import DraftConfig
from inference.decoding.hidden_states import default_aux_layers
from inference.server_info import parse_server_info
from training.export import config_json, expected_shapes
from training.preflight import DraftCheckpoint

RECORDED = Path(__file__).resolve().parent.parent / "data" / "recorded" / "sglang_server_info"

LLAMA_TARGET: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "rope_theta": 500000.0,
}
KIMI_TARGET: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
    "intermediate_size": 18432, "num_hidden_layers": 61, "num_attention_heads": 64, "vocab_size": 163840,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
}


def server_info(name: str) -> dict[str, Any]:
    """A recorded /server_info answer by file stem."""
    return dict(json.loads((RECORDED / f"{name}.json").read_text()))


def recorded_server(name: str) -> ServerInfo:
    """A recorded /server_info answer by file stem, parsed as the preflight reads it."""
    return parse_server_info(server_info(name))


def draft_for(target: dict[str, Any], stride: int) -> DraftCheckpoint:
    """The draft our export writes for target: 32000 draft tokens (every stride-th target id), bf16."""
    cfg = DraftConfig(hidden_size=target["hidden_size"], intermediate_size=target["intermediate_size"],
                      num_attention_heads=target["num_attention_heads"],
                      num_key_value_heads=target.get("num_key_value_heads", target["num_attention_heads"]),
                      vocab_size=target["vocab_size"], draft_vocab_size=32000, target_hidden_size=target["hidden_size"],
                      max_position_embeddings=target["max_position_embeddings"])
    used = torch.arange(32000) * stride
    t2d = torch.zeros(target["vocab_size"], dtype=torch.bool)
    t2d[used] = True
    config = config_json(cfg, default_aux_layers(target["num_hidden_layers"]), "bfloat16",
                         target_layers=target["num_hidden_layers"])
    return DraftCheckpoint(config=config, shapes=expected_shapes(cfg), d2t=used - torch.arange(32000), t2d=t2d)


def llama_draft() -> DraftCheckpoint:
    return draft_for(LLAMA_TARGET, stride=4)


def kimi_draft() -> DraftCheckpoint:
    return draft_for(KIMI_TARGET, stride=5)


def altered(draft: DraftCheckpoint, **config: Any) -> DraftCheckpoint:
    """A copy of draft with config keys replaced."""
    new = copy.deepcopy(draft)
    new.config.update(config)
    return new
