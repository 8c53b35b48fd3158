"""What training needs of a target that it never loads: its embeddings, output head and final norm, read
straight from the checkpoint's safetensors files, and the final norm applied the way the target applies it.

A target served by an engine (1T parameters over 8 GPUs) is never loaded by datahunt: the engine computes its
hidden states (`training.engine_capture`, `training.engine_features`) and the trainer only needs the input
embeddings (the draft's, frozen), the output head (the target's logits from its final state) and the final
norm (an engine hands out the last layer's output before it). Those three tensors are read by name from the
checkpoint (`model.safetensors.index.json` says which file holds each), a few hundred MB of a checkpoint of
hundreds of GB. Tied embeddings serve as the head. Gemma scales its input embeddings by sqrt(hidden) and its
norms by (1 + weight); every other family here (Llama, Qwen, Mistral, DeepSeek-V3, Kimi-K2) by weight.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from core.target_config import read_model_config
from training.errors import TrainingError

INDEX = "model.safetensors.index.json"


class CheckpointHeadError(TrainingError, ValueError):
    """A target folder whose embeddings, head or final norm cannot be found."""


@dataclass(frozen=True)
class TargetHead:
    """The target's scaled input embeddings (fp32), output head, final norm weight and how the norm is applied."""

    embed: Tensor  # [V, H] fp32, scaled as the target's first layer sees it
    head: Tensor  # [V, H]
    norm: Tensor  # [H]
    eps: float
    gemma_norm: bool  # the norm scales by (1 + weight)

    def final_state(self, pre_norm: Tensor) -> Tensor:
        """The target's final hidden state (after its norm, as `output_hidden_states[-1]`) from the last layer's
        output before the norm, computed in fp32."""
        x = pre_norm.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        weight = self.norm.float()
        return x * (1.0 + weight) if self.gemma_norm else x * weight


def _text_config(config: dict[str, object]) -> dict[str, object]:
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def _weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it."""
    from safetensors import safe_open

    index = folder / INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}
        return {str(name): folder / str(file) for name, file in weight_map.items()}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointHeadError(f"target folder {folder} has no safetensors weights (and no {INDEX})")
    names: dict[str, Path] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            names.update(dict.fromkeys(f.keys(), path))  # noqa: SIM118  # safe_open is not a mapping
    return names


def _find(names: dict[str, Path], suffix: str) -> str | None:
    """The shortest tensor name ending with `suffix` outside the decoder layers (the model's own, not a layer's)."""
    found = [n for n in names if n.endswith(suffix) and ".layers." not in n and "mtp" not in n]
    return min(found, key=len) if found else None


def read_target_head(folder: Path, dtype: torch.dtype | None = None) -> TargetHead:
    """Read the embeddings, head and final norm of the target in `folder` without loading its layers; the head
    and norm are cast to `dtype` when given (as a target loaded in that dtype holds them). CheckpointHeadError
    (one line) when one is missing."""
    from safetensors import safe_open

    config_file = folder / "config.json"
    if not config_file.is_file():
        raise CheckpointHeadError(f"target folder {folder} has no config.json")
    config = _text_config(dict(read_model_config(config_file)))
    names = _weight_files(folder)
    embed_name = _find(names, "embed_tokens.weight")
    norm_name = _find(names, "norm.weight")
    head_name = "lm_head.weight" if "lm_head.weight" in names else _find(names, "lm_head.weight")
    if embed_name is None or norm_name is None:
        raise CheckpointHeadError(f"target folder {folder}: no {'embed_tokens' if embed_name is None else 'final norm'}"
                                  " weight in its safetensors")
    if head_name is None and not config.get("tie_word_embeddings"):
        raise CheckpointHeadError(f"target folder {folder}: no lm_head.weight and the embeddings are not tied")

    def tensor(name: str) -> Tensor:
        with safe_open(str(names[name]), framework="pt") as f:
            value: Tensor = f.get_tensor(name)
        return value

    embed = tensor(embed_name)
    head = tensor(head_name) if head_name is not None else embed
    model_type = str(config.get("model_type", ""))
    gemma = model_type.startswith("gemma")
    hidden = int(config.get("hidden_size") or embed.shape[1])  # type: ignore[call-overload]
    scale = hidden**0.5 if gemma else 1.0
    eps = float(config.get("rms_norm_eps") or config.get("layer_norm_eps") or 1e-6)  # type: ignore[arg-type]
    norm = tensor(norm_name)
    return TargetHead(embed=embed.float() * scale, head=head.to(dtype) if dtype is not None else head,
                      norm=norm.to(dtype) if dtype is not None else norm, eps=eps, gemma_norm=gemma)
