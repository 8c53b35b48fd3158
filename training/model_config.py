"""The keys of a draft's `config.json` that the serving checks read, ours or another tool's: a model config
(`core.target_config.ModelConfig`, re-exported here with its reader) plus the EAGLE-3 keys.
"""

from __future__ import annotations

from typing import TypedDict

from core.target_config import ModelConfig, read_model_config

__all__ = ["DatahuntRead", "DraftModelConfig", "EagleConfigRead", "ModelConfig", "read_model_config"]


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
