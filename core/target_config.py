"""A model's `config.json`, the one reader: the keys the serving checks read, as the model ships them.

Every key is optional (a config from elsewhere may lack any), so readers `.get` them and say what is unknown; the
file is read whole, its other keys kept as they are. A target folder's (`read_target_config`) is read by curation
(the card's target identity), inference (the target folder check), training (the export dtype, the cache's
target key, the preflight) and the front doors (launch lines, `check-server`, the engine plan) alike; a draft's
adds the EAGLE-3 keys (`training.model_config.DraftModelConfig`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

CONFIG_FILE = "config.json"


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
    tie_word_embeddings: bool
    text_config: ModelConfig
    _name_or_path: str


def read_model_config(file: Path) -> ModelConfig:
    """A `config.json` as it is; OSError or ValueError (a json.JSONDecodeError and a file that is not UTF-8
    included) when it cannot be read or is not a JSON object."""
    config: ModelConfig = json.loads(Path(file).read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError(f"{file} is not a JSON object")
    return config


def read_target_config(folder: Path) -> ModelConfig | None:
    """The `config.json` of the model folder `folder`, or None when it has none; OSError or ValueError when the
    file is there but unreadable or not a JSON object."""
    file = Path(folder) / CONFIG_FILE
    return read_model_config(file) if file.is_file() else None
