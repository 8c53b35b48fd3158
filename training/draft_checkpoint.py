"""A draft checkpoint as the preflight checks read it: its config.json, tensor shapes and vocab maps
(`read_draft`), whether it is an EAGLE-3 draft, and a fingerprint of its config and weights to tell a copy
from another draft; and the language model's keys of a target's config (`text_config`), which the checks and the
aux-layer rules (`training.aux_layers`) read the draft against.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from training.export import WEIGHTS_FILE, ExportError, read_config
from training.model_config import DraftModelConfig, ModelConfig


@dataclass
class DraftCheckpoint:
    """What the checks read from a draft folder: config.json, tensor shapes, and the vocab maps if present."""

    config: DraftModelConfig
    shapes: dict[str, tuple[int, ...]]
    d2t: Tensor | None = None
    t2d: Tensor | None = None
    folder: Path | None = None


def read_draft(folder: Path) -> DraftCheckpoint:
    """Read config.json and the safetensors header (shapes only; d2t and t2d in full) of a draft folder."""
    from safetensors import safe_open

    config = read_config(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ExportError(f"no safetensors weights in {folder} (expected {WEIGHTS_FILE})")
    shapes: dict[str, tuple[int, ...]] = {}
    maps: dict[str, Tensor] = {}
    for path in files:
        with safe_open(str(path), "pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                shapes[key] = tuple(f.get_slice(key).get_shape())
                if key in {"d2t", "t2d"}:
                    maps[key] = f.get_tensor(key)
    return DraftCheckpoint(config=config, shapes=shapes, d2t=maps.get("d2t"), t2d=maps.get("t2d"), folder=folder)


def text_config(config: ModelConfig | None) -> ModelConfig:
    """The language model's keys: a multimodal config's `text_config`, else the config itself."""
    if not config:
        return {}
    return config.get("text_config") or config


def is_eagle3_draft(draft: DraftCheckpoint) -> bool:
    """An EAGLE-3 draft: its architecture says so, it names aux layers, or it has an `fc` reading 3 states."""
    arch = " ".join(draft.config.get("architectures") or [])
    eagle = draft.config.get("eagle_config") or {}
    return "eagle3" in arch.lower() or bool(eagle.get("eagle_aux_hidden_state_layer_ids")) or bool(
        eagle.get("use_aux_hidden_state"))



def _sha256_of(files: list[Path]) -> str:
    """sha256 of the files' bytes in order (for one file, what `sha256sum` prints)."""
    digest = hashlib.sha256()
    for path in files:
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def draft_fingerprint(folder: Path) -> tuple[str, str]:
    """Return (sha256 of the canonical config.json, sha256 of the safetensors files) of a draft folder."""
    config = json.dumps(read_config(folder), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(config.encode()).hexdigest(), _sha256_of(sorted(folder.glob("*.safetensors")))
