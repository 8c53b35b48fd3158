"""Greedy acceptance length by replay: every round of a greedy chain, computed in one batched pass.

Under greedy decoding the speculative output is the target's greedy output y, so every round is known in
advance: a round that starts with the cache holding positions 0..t proposes d_1..d_k from the draft's TTT
unroll at position t, and d_j stands while it equals y[t+1+j]. While proposals match, the tokens the draft
reads are exactly y's, so feeding y to the unroll (teacher forcing) gives the same proposals the decoder
makes; after the first mismatch nothing more is read. One target forward over prompt + y (for the aux states)
and one draft unroll score every position at once, and the rounds are then walked on the host: start at
t = len(prompt) - 1, accept a, move to t + a + 1. `tests/training/test_replay.py` checks it against the
KV-cached decoder round for round. It measures acceptance only: the wall-clock speedup needs the decoder.
"""

from __future__ import annotations

from typing import Any

import torch

from inference.decoding.draft_model import Eagle3Draft
from inference.decoding.hidden_states import AuxLayers, capture
from inference.decoding.speculative import RoundCounts


@torch.no_grad()
def replay_counts(target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]],
                  outputs: list[list[int]], k: int, batch: int = 16) -> RoundCounts:
    """Pooled round counts of greedy chain-k decoding of each prompt whose greedy output is `outputs[i]`."""
    device = next(target.parameters()).device
    counts = RoundCounts(attempted=[0] * k, accepted=[0] * k)
    draft.eval()
    pairs = [(p, o) for p, o in zip(prompts, outputs, strict=True) if len(o) > 1]
    for start in range(0, len(pairs), batch):
        chunk = pairs[start : start + batch]
        width = max(len(p) + len(o) for p, o in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        attn = torch.zeros(len(chunk), width, dtype=torch.long)
        for i, (p, o) in enumerate(chunk):
            ids[i, : len(p) + len(o)] = torch.tensor(p + o)
            attn[i, : len(p) + len(o)] = 1
        ids, attn = ids.to(device), attn.to(device)
        states = capture(target, ids, attn, layers)
        steps = draft(ids, states.aux, k)
        preds = torch.stack([draft.draft_to_target(s.argmax(-1)) for s in steps], -1).tolist()  # [B, T, k]
        for i, (p, o) in enumerate(chunk):
            walk_rounds(counts, preds[i], p + o, len(p), k)
    return counts


def walk_rounds(counts: RoundCounts, preds: list[list[int]], seq: list[int], prompt_len: int, k: int) -> None:
    """Walk the rounds of one sequence: preds[t][j] is the draft's step-j proposal at position t."""
    end = len(seq)
    t = prompt_len - 1  # the prefill emitted seq[prompt_len]; the first chain starts here
    while t + 2 <= end:  # at least one output token is still to come
        remaining = end - (t + 2)  # tokens after seq[t+1] still to emit
        accepted = 0
        while accepted < min(k, remaining) and preds[t][accepted] == seq[t + 2 + accepted]:
            accepted += 1
        emitted = min(accepted + 1, remaining)
        if emitted <= 0:
            break
        counts.record(accepted, k, emitted)
        t += accepted + 1
