"""What training's offline mode needs of the target beside its cached hidden states.

Offline mode reads the aux and final hidden states from a cache (`training.capture` writes it,
`training.offline_cache` holds its format) instead of running the target, so the target's logits are
recomputed at training time from the final state and the target's own output head; and each cache is keyed by
a hash of the tokenized rows it was built from.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch
from torch import Tensor


def output_head(target: Any) -> tuple[Tensor, float | None]:
    """The target's output projection weight [V, H] and its final-logit softcap (Gemma), for offline mode."""
    softcap = getattr(target.config, "final_logit_softcapping", None)
    return target.get_output_embeddings().weight.detach(), softcap


def logits_from_final(final: Tensor, head: Tensor, softcap: float | None) -> Tensor:
    """Recompute the target's logits from its final hidden state (as the target's own head does)."""
    logits = final.to(head.dtype) @ head.T
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


def data_hash(rows: list[tuple[list[int], list[int]]]) -> str:
    """A short hash of tokenized training rows (ids and masks), the key of caches built from them."""
    h = hashlib.sha256()
    for ids, mask in rows:
        h.update(json.dumps([ids, mask]).encode())
    return h.hexdigest()[:24]
