"""Target hidden states for the draft: which layers (with their convention), capture, the target's embeddings.

Conventions. SGLang captures the *input* of layers `[2, L//2, L-3]` by default (61 layers -> [2, 30, 58]);
SpecForge writes *output*-of-layer ids `[1, L//2-1, L-4]`, the same tensors. In `transformers`,
`hidden_states[0]` is the embedding output, so the input of layer i is `hidden_states[i]` and the output of
layer i is `hidden_states[i+1]`. `AuxLayers` always carries its convention, so the +1 is applied once.

Training's online mode and every decoder run the target and `capture` these states; training's offline mode
reads a cache of the same states instead (`training.offline_cache`, with `training.offline_target`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

Convention = Literal["input", "output"]


@dataclass(frozen=True)
class AuxLayers:
    """Three layer ids and what they mean: `input` (SGLang's: input of layer i) or `output` (SpecForge's)."""

    ids: tuple[int, int, int]
    convention: Convention

    def as_input(self) -> AuxLayers:
        """The same tensors as input-of-layer ids (output of layer i is the input of layer i+1)."""
        if self.convention == "input":
            return self
        a, b, c = self.ids
        return AuxLayers((a + 1, b + 1, c + 1), "input")

    def as_output(self) -> AuxLayers:
        """The same tensors as output-of-layer ids."""
        if self.convention == "output":
            return self
        a, b, c = self.ids
        return AuxLayers((a - 1, b - 1, c - 1), "output")

    def hidden_state_indices(self) -> tuple[int, int, int]:
        """Indices into transformers' `hidden_states` tuple (index 0 = embedding output = input of layer 0)."""
        a, b, c = self.as_input().ids
        return (a, b, c)

    def validate(self, num_layers: int) -> None:
        """Raise ValueError unless every id is a real layer input of a target with num_layers layers."""
        ids = self.as_input().ids
        if min(ids) < 1 or max(ids) > num_layers - 1:
            raise ValueError(
                f"aux layers {list(self.ids)} ({self.convention}-of-layer) are outside a {num_layers}-layer target: "
                f"input-of-layer ids must lie in [1, {num_layers - 1}]"
            )


def parse_aux_ids(text: str) -> tuple[int, int, int]:
    """Three comma-separated input-of-layer ids (`2,30,58`); ValueError naming the text otherwise."""
    try:
        ids = tuple(int(x) for x in text.split(","))
    except ValueError:
        ids = ()
    if len(ids) != 3:
        raise ValueError(f"--aux-layers {text!r}: give three input-of-layer ids, e.g. 2,30,58")
    return ids[0], ids[1], ids[2]


def default_aux_layers(num_layers: int) -> AuxLayers:
    """SGLang's default capture, input-of-layer `[2, L//2, L-3]`; tiny test targets (3-6 layers) use
    [2, max(2, L//2), L-1], still starting at input 2 (output 1) so every model family's +1 rule reads them
    alike (DeepSeek's adds 1 only when the first id is 1). Below 6 layers two of them coincide, which SGLang
    captures once: such targets are for local tests only, and the preflight refuses them on a server."""
    if num_layers >= 7:
        return AuxLayers((2, num_layers // 2, num_layers - 3), "input")
    if num_layers < 3:
        raise ValueError("a target needs at least 3 layers to give auxiliary hidden states")
    return AuxLayers((2, max(2, num_layers // 2), num_layers - 1), "input")


@dataclass
class TargetStates:
    """Aux states [B, T, 3*H] (low || mid || high), the final hidden state [B, T, H], the logits [B, T, V]."""

    aux: Tensor
    final: Tensor
    logits: Tensor


@torch.no_grad()
def capture(target: Any, input_ids: Tensor, attention_mask: Tensor, layers: AuxLayers) -> TargetStates:
    """Run the target once with `output_hidden_states` and gather the three aux layers and the final state."""
    out = target(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    hs = out.hidden_states
    aux = torch.cat([hs[i] for i in layers.hidden_state_indices()], dim=-1)
    return TargetStates(aux=aux, final=hs[-1], logits=out.logits)


def target_embeddings(target: Any) -> Tensor:
    """The target's token embeddings as its first layer sees them (Gemma multiplies by sqrt(hidden)), fp32."""
    embed = target.get_input_embeddings()
    weight = embed.weight.detach().float()
    scale = getattr(embed, "embed_scale", None)
    scaled: Tensor = weight * float(scale) if scale is not None else weight
    return scaled
