"""The keys of a model's `config.json` that the serving checks read: a target's, as the model ships it, and a
draft's, ours or another tool's.

Every key is optional (a config from elsewhere may lack any), so readers `.get` them and say what is unknown;
a file is read whole, its other keys kept as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict


class ModelConfig(TypedDict, total=False):
    """A Hugging Face `config.json`: the sizes, family and dtype keys read; a multimodal model nests the
    language model's under `text_config`."""

    architectures: list[str]
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    max_position_embeddings: int
    torch_dtype: str
    dtype: str
    text_config: ModelConfig


class EagleConfigRead(TypedDict, total=False):
    """A draft's `eagle_config` as read: the aux layer ids in the layout of the engine the folder is for."""

    eagle_aux_hidden_state_layer_ids: list[int]
    use_aux_hidden_state: bool


class DatahuntRead(TypedDict, total=False):
    """A draft's `datahunt` block as read (only our exports have one): the layers trained on, the engine whose
    layout the file holds, the trained-on target's depth."""

    aux_layer_ids_input_of_layer: list[int]
    engine: str
    target_num_hidden_layers: int


class DraftModelConfig(ModelConfig, total=False):
    """A draft's `config.json` (`training.export.read_config`): a model config plus the EAGLE-3 keys."""

    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int | None
    draft_vocab_size: int
    target_hidden_size: int
    rms_norm_eps: float
    rope_theta: float
    eagle_config: EagleConfigRead
    datahunt: DatahuntRead


def read_model_config(file: Path) -> ModelConfig:
    """A `config.json` as it is; OSError or ValueError (a json.JSONDecodeError included) when it cannot be read
    or is not a JSON object."""
    config: ModelConfig = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError(f"{file} is not a JSON object")
    return config
