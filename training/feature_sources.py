"""Where a run's target states come from when they are not computed as it trains: a capture's cache (opened
only for this target and tokenizer, and only whole), or a cache captured in this process once per (data,
tokenizer, layers) in the format `datahunt capture` writes."""

from __future__ import annotations

import logging
from typing import Any

import torch

from inference.decoding.hidden_states import AuxLayers
from training.config import ConfigError, TrainConfig
from training.data import TokenizedRow
from training.tokenized import tokenizer_hash

logger = logging.getLogger(__name__)


def load_cached(cfg: TrainConfig) -> tuple[Any, Any, Any]:
    """Offline mode from a capture: the cache (refused in one line when another target's or tokenizer's, or
    incomplete), the target without its decoder layers, and the tokenizer."""
    from transformers import AutoConfig, AutoTokenizer

    from training.offline_cache import open_cache

    assert cfg.cache is not None
    if cfg.data is not None:
        logger.warning("data %s is not read: the rows trained on are the cache's (%s)", cfg.data, cfg.cache)
    tokenizer = AutoTokenizer.from_pretrained(str(cfg.target))
    cache = open_cache(cfg.cache, cfg.target, tokenizer_hash(tokenizer))
    return cache, cache.head_target(AutoConfig.from_pretrained(str(cfg.target))), tokenizer


def cache_layers(cfg: TrainConfig, cache: Any) -> AuxLayers:
    """The cache's aux layers; a run config asking for others is refused (the states of those are not there)."""
    layers: AuxLayers = cache.layers
    if cfg.aux_layer_ids and tuple(cfg.aux_layer_ids) != layers.ids:
        raise ConfigError(f"aux_layer_ids {list(cfg.aux_layer_ids)} differ from the cache's {list(layers.ids)} "
                          "(input-of-layer): capture those layers, or drop the setting")
    return layers


def offline_source(cfg: TrainConfig, target: Any, rows: list[TokenizedRow], layers: AuxLayers, key: str,
                   tokenizer_fingerprint: str) -> Any:
    """Offline mode without a given cache: capture one in this process, once per (data, tokenizer, layers) key, in
    the format `datahunt capture` writes (in the target's dtype), then serve it."""
    from training.capture import capture_into
    from training.offline_cache import OfflineCache, read_manifest, target_identity

    folder = cfg.out / "hidden_cache" / f"{key}-{'-'.join(map(str, layers.as_input().ids))}"
    manifest = read_manifest(folder) if (folder / "manifest.json").is_file() else None
    if manifest is None or not manifest.get("complete"):
        dtype = "bfloat16" if next(iter(target.parameters())).dtype == torch.bfloat16 else "float32"
        capture_into(folder, target, rows, layers, target_identity(cfg.target), tokenizer_fingerprint, dtype=dtype)
        manifest = read_manifest(folder)
    return OfflineCache(folder, manifest)
