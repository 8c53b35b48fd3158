"""Offline mode's target logits: a cache of captured states gives back what the target computes online."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import make_gemma, make_llama

from inference.decoding.hidden_states import AuxLayers, capture


@pytest.mark.parametrize("make", [make_llama, make_gemma], ids=["llama", "gemma3"])
def test_offline_shards_give_back_the_online_states_and_logits(make: Any, tmp_path: Path) -> None:
    from training.capture import capture_into
    from training.data import TokenizedRow
    from training.offline_cache import OfflineCache, read_manifest

    model = make(50, layers=3)
    rows = [TokenizedRow(f"r{i}", ids, mask) for i, (ids, mask) in enumerate(
        [([3, 4, 5, 6], [0, 0, 1, 1]), ([7, 8, 9], [0, 1, 1]), ([1, 2, 3, 4, 5], [0, 0, 0, 1, 1])])]
    layers = AuxLayers((1, 1, 2), "input")
    per_token = 4 * 64 * 4 + 5  # fp32 aux (3 x 64) and final (64), id and mask
    capture_into(tmp_path, model, rows, layers, "target", "tokenizer", dtype="float32", shard_bytes=7 * per_token)
    cache = OfflineCache(tmp_path, read_manifest(tmp_path))
    assert [(r.input_ids, r.loss_mask) for r in cache.rows()] == [(r.input_ids, r.loss_mask) for r in rows]
    assert len(list(tmp_path.glob("shard_*.safetensors"))) == 2  # rows 0-1 (7 tokens), then row 2
    x = torch.tensor([rows[1].input_ids])
    online = capture(model, x, torch.ones_like(x), layers)
    aux, logits = cache.lookup(x, torch.ones_like(x))
    torch.testing.assert_close(aux, online.aux)
    torch.testing.assert_close(logits, online.logits)
