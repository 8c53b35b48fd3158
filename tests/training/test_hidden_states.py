"""Aux layer conventions, capture of the right tensors from Llama and Gemma targets, and offline shards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import make_gemma, make_llama

from training.hidden_states import (
    AuxLayers,
    capture,
    default_aux_layers,
)


def test_sglang_default_for_a_61_layer_target_and_specforge_ids() -> None:
    layers = default_aux_layers(61)
    assert layers == AuxLayers((2, 30, 58), "input")
    assert layers.as_output().ids == (1, 29, 57)
    assert AuxLayers((1, 29, 57), "output").as_input() == layers
    assert default_aux_layers(32).ids == (2, 16, 29)
    assert default_aux_layers(4).ids == (2, 2, 3)


def test_transformers_index_zero_is_the_embedding_output() -> None:
    assert AuxLayers((2, 30, 58), "input").hidden_state_indices() == (2, 30, 58)
    assert AuxLayers((2, 30, 58), "output").hidden_state_indices() == (3, 31, 59)


def test_ids_outside_the_target_are_refused() -> None:
    with pytest.raises(ValueError, match="outside a 4-layer target"):
        AuxLayers((2, 30, 58), "input").validate(4)


def _layer_inputs(model: Any, ids: torch.Tensor) -> dict[int, torch.Tensor]:
    seen: dict[int, torch.Tensor] = {}

    def recorder(i: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            seen[i] = (args[0] if args else kwargs["hidden_states"]).clone()

        return hook

    hooks = [layer.register_forward_pre_hook(recorder(i), with_kwargs=True) for i, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.parametrize("make", [make_llama, make_gemma], ids=["llama", "gemma3"])
def test_capture_takes_the_inputs_of_the_named_layers(make: Any) -> None:
    model = make(50, layers=4)
    ids = torch.randint(0, 50, (1, 9))
    layers = AuxLayers((1, 2, 3), "input")
    states = capture(model, ids, torch.ones_like(ids), layers)
    inputs = _layer_inputs(model, ids)
    expected = torch.cat([inputs[1], inputs[2], inputs[3]], dim=-1)
    torch.testing.assert_close(states.aux, expected)
    # The same tensors named in SpecForge's convention.
    torch.testing.assert_close(capture(model, ids, torch.ones_like(ids), layers.as_output()).aux, expected)


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
