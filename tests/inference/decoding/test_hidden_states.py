"""Aux layer conventions and capture of the right tensors from Llama and Gemma targets."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tiny_models import make_gemma, make_llama

from inference.decoding.hidden_states import (
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

    hooks = [layer.register_forward_pre_hook(recorder(i), with_kwargs=True)
             for i, layer in enumerate(model.model.layers)]
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
