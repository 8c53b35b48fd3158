"""Greedy chain decoding with every round in one CUDA graph: draft chain, target verify, accept, draft update.

On a small target a round of eager speculative decoding costs more in kernel launches and host round trips
than the target's own graph-replayed decode step, so the eager loop (`inference.decoding.speculative`) cannot show a
real speedup there. Here one round is a fixed-shape program (gpt-fast's habit: static caches, positions as
device tensors, masks instead of slicing), captured once and replayed:

1. chain: k greedy draft tokens from the newest verified position (`start - 1`), attending to the draft's
   step-0 cache (positions < start) and to this chain's own keys;
2. verify: the target scores [last token, d_1..d_k] at positions start..start+k over its static cache;
3. accept: a = the number of leading drafts equal to the target's argmax (a cumulative product of matches);
   the bonus token is the target's argmax after them; the round emits d_1..d_a and the bonus;
4. update: the draft's step-0 keys/values for positions start..start+a are written (from the verify's aux
   states and the token after each position) and its newest hidden state is kept; start moves by a + 1.

The host reads one small tensor per round (a and the emitted tokens) to apply end-of-sequence and max_new.
`GreedyBaseline` is the target alone, its decode step graph-replayed and its token kept on the device, the
host checking for end-of-sequence every `sync_every` tokens: the strongest plain decoding this code base
has, so the speedup is measured against it. Without CUDA both run the same code eagerly (tested on CPU).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from inference.decoding.draft_model import Eagle3Draft, PackedDraftLayer
from inference.decoding.hidden_states import AuxLayers
from inference.decoding.speculative import RoundCounts, cut_output
from inference.decoding.static_llama import DecodeGraph, StaticLlama, capture_graph


class GreedyRoundGraph:
    """One greedy round over static buffers; `decode(prompt, ...)` runs a whole prompt."""

    def __init__(self, target: Any, draft: Eagle3Draft, layers: AuxLayers, *, k: int, max_len: int,
                 use_graph: bool = True) -> None:
        self.target = StaticLlama(target, slots=1, max_len=max_len + k + 1)
        self.draft, self.k, self.max_len = draft, k, max_len + k + 1
        self.aux_ids = layers.as_input().ids
        dev = self.device = self.target.embed.device
        attn = draft.midlayer.self_attn
        dtype = draft.fc.weight.dtype
        # One key/value buffer: the step-0 cache (positions 0..max_len-1), then k slots for a chain's own keys,
        # so a chain step attends to both without concatenating them.
        self.k0 = torch.zeros(1, attn.heads, self.max_len + k, attn.head_dim, device=dev, dtype=dtype)
        self.v0 = torch.zeros_like(self.k0)
        self.hidden = torch.zeros(1, 1, draft.cfg.hidden_size, device=dev, dtype=dtype)
        self.start = torch.zeros(1, dtype=torch.long, device=dev)
        self.last = torch.zeros(1, dtype=torch.long, device=dev)
        self.result = torch.zeros(k + 2, dtype=torch.long, device=dev)  # [a, emitted tokens (k + 1 slots)]
        self.key_pos = torch.arange(self.max_len + k, device=dev)
        # Chain step j sees the keys of its chain's steps 1..j (buffer slots max_len .. max_len+j-1) besides
        # the verified prefix.
        self.own = [((self.key_pos >= self.max_len) & (self.key_pos < self.max_len + j))[None, None, None, :]
                    for j in range(k)]
        self.cos, self.sin = draft.midlayer.rope_tables(self.max_len + k, dev, dtype)
        self.layer = PackedDraftLayer(draft.midlayer)  # the layer's math in fewer kernels per step
        self.graph: Any = None
        if use_graph and dev.type == "cuda":
            self._capture()

    # --- the round ---------------------------------------------------------------------------------------
    def _round(self) -> None:
        k, draft, layer = self.k, self.draft, self.layer
        proposals = self._chain()
        block = torch.cat([self.last, proposals])[None]
        positions = (self.start + torch.arange(k + 1, device=self.device))[None]
        logits, aux = self.target.forward(block, positions, aux_ids=self.aux_ids)
        assert aux is not None
        accepted, bonus = self._accept(proposals, logits[0])
        slots = torch.arange(k + 1, device=self.device)
        emitted = torch.where(slots < accepted, torch.cat([proposals, proposals[-1:]]), 0)
        emitted = emitted.scatter(0, accepted.view(1), bonus)
        # Update the draft: positions start..start+k read the token after them (only 0..a are real; the rest
        # lie past the new start, invisible, and the next round overwrites them).
        hidden = draft.fc(aux.to(draft.fc.weight.dtype))
        embeds = draft.embed_tokens(emitted[None]).to(hidden.dtype)
        q, kk, vv = layer.project(embeds, hidden, self._tables(positions[0]))
        self.k0.index_copy_(2, positions[0], kk)
        self.v0.index_copy_(2, positions[0], vv)
        mask = (self.key_pos[None, :] <= positions[0][:, None])[None, None]  # [1, 1, k+1, L+k]: no chain slot
        out = F.scaled_dot_product_attention(q, self.k0, self.v0, attn_mask=mask)
        newest = layer.finish(out.transpose(1, 2).reshape(1, k + 1, -1), residual=hidden)
        self.hidden.copy_(newest.index_select(1, accepted.view(1)))
        self.start.add_(accepted + 1)
        self.last.copy_(bonus)
        self.result.copy_(torch.cat([accepted.view(1), emitted]))

    def _chain(self) -> Tensor:
        """k greedy proposals (target ids) from the newest position; the chain's keys sit past max_len in k0/v0."""
        draft, layer, k = self.draft, self.layer, self.k
        hidden = self.hidden
        token = self._pick(0, draft.logits(hidden)[0, -1])
        proposals = [token]
        base = (self.key_pos < self.start)[None, None, None, :]  # step-0 keys of verified positions
        for j in range(1, k):
            pos = self.start - 1 + j  # the chain slot's position (TTT step j)
            q, kj, vj = layer.project(draft.embed_tokens(token.view(1, 1)).to(hidden.dtype), hidden,
                                      self._tables(pos))
            self.k0[:, :, self.max_len + j - 1 : self.max_len + j] = kj
            self.v0[:, :, self.max_len + j - 1 : self.max_len + j] = vj
            out = F.scaled_dot_product_attention(q, self.k0, self.v0, attn_mask=base | self.own[j])
            hidden = layer.finish(out.transpose(1, 2).reshape(1, 1, -1), residual=hidden)
            token = self._pick(j, draft.logits(hidden)[0, -1])
            proposals.append(token)
        return torch.cat(proposals)

    def _pick(self, j: int, draft_logits: Tensor) -> Tensor:
        """Chain step j's proposal [1] (a target id) from the draft's logits [draft vocab]: greedy, the argmax."""
        return self.draft.draft_to_target(draft_logits.argmax().view(1))

    def _accept(self, proposals: Tensor, logits: Tensor) -> tuple[Tensor, Tensor]:
        """(drafts accepted [], the token after them [1]) from the target's logits [k+1, V]: greedy, the
        leading drafts equal to its argmax, then its argmax."""
        preds = logits.argmax(-1)
        accepted = torch.cumprod((proposals == preds[: self.k]).long(), 0).sum()
        return accepted, preds.gather(0, accepted.view(1))

    def _tables(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The draft's rotary rows at positions [T]: looked up, not recomputed, inside the graph."""
        return self.cos.index_select(0, positions), self.sin.index_select(0, positions)

    def _capture(self) -> None:
        self.graph, _ = capture_graph(self._round, restore=(self.start, self.last, self.hidden))

    # --- a prompt ----------------------------------------------------------------------------------------
    def _first_token(self, logits: Tensor) -> Tensor:
        """The prefill's token [1] from the target's last logits [V] (greedy: the argmax)."""
        return logits.argmax().view(1)

    def _before_round(self) -> None:
        """What the host does before each round (nothing for greedy; the sampled round draws its noise)."""

    @torch.no_grad()
    def decode(self, prompt: list[int], max_new: int, eos: set[int], counts: RoundCounts) -> list[int]:
        """Greedy speculative decoding of one prompt; returns the new tokens (eos included)."""
        if len(prompt) + max_new + self.k + 1 > self.max_len:
            raise ValueError(f"prompt of {len(prompt)} + {max_new} new tokens exceeds {self.max_len} positions")
        draft, layer, n = self.draft, self.layer, len(prompt)
        x = torch.tensor([prompt], device=self.device)
        logits, aux = self.target.forward(x, torch.arange(n, device=self.device)[None],
                                          slots=torch.zeros(1, dtype=torch.long, device=self.device), prefill=True,
                                          aux_ids=self.aux_ids)
        assert aux is not None
        first = self._first_token(logits[0, -1])
        # The prompt's step-0 entries: position t reads token t+1 (the last one reads the first output token).
        hidden = draft.fc(aux.to(draft.fc.weight.dtype))
        following = torch.cat([x[0, 1:], first])[None]
        prefix = torch.arange(n, device=self.device)
        q, kk, vv = layer.project(draft.embed_tokens(following).to(hidden.dtype), hidden, self._tables(prefix))
        self.k0[:, :, :n], self.v0[:, :, :n] = kk, vv
        out = F.scaled_dot_product_attention(q[:, :, -1:], kk, vv)
        self.hidden.copy_(layer.finish(out.transpose(1, 2).reshape(1, 1, -1), residual=hidden[:, -1:]))
        self.start.fill_(n)
        self.last.copy_(first)
        out_tokens = [int(first)]
        while len(out_tokens) < max_new and out_tokens[-1] not in eos:
            self._before_round()
            if self.graph is not None:
                self.graph.replay()
            else:
                self._round()
            result = self.result.tolist()
            accepted, new = result[0], result[1 : result[0] + 2]
            stop = next((i for i, t in enumerate(new[:accepted]) if t in eos), None)
            if stop is not None:  # an accepted end-of-sequence ends the output: no bonus token
                accepted, new = stop + 1, new[: stop + 1]
            remaining = max_new - len(out_tokens)
            new = new[:remaining]
            counts.record(min(accepted, remaining), self.k, len(new))
            out_tokens += new
        return cut_output(out_tokens, max_new, eos)


class GreedyBaseline:
    """The target alone: graph-replayed decode step, tokens kept on the device, eos checked every few steps."""

    def __init__(self, target: Any, *, max_len: int, use_graph: bool = True, sync_every: int = 16) -> None:
        self.runner = StaticLlama(target, slots=1, max_len=max_len)
        self.graph = DecodeGraph(self.runner, use_graph=use_graph)
        self.sync_every, self.device = sync_every, self.runner.embed.device

    @torch.no_grad()
    def decode(self, prompt: list[int], max_new: int, eos: set[int]) -> list[int]:
        """The target's greedy continuation of prompt (eos included)."""
        n = len(prompt)
        logits, _ = self.runner.forward(torch.tensor([prompt], device=self.device),
                                        torch.arange(n, device=self.device)[None],
                                        slots=torch.zeros(1, dtype=torch.long, device=self.device), prefill=True)
        token = logits[0, -1].argmax().view(1, 1)
        out = torch.zeros(max_new, dtype=torch.long, device=self.device)
        out[0] = token[0, 0]
        position = torch.full((1, 1), n, dtype=torch.long, device=self.device)
        made = 1
        while made < max_new:
            steps = min(self.sync_every, max_new - made)
            for _ in range(steps):
                token = self.graph.step(token, position).argmax(-1).view(1, 1)
                out[made] = token[0, 0]
                position = position + 1
                made += 1
            tokens = out[:made].tolist()
            if any(t in eos for t in tokens):
                break
        return cut_output(out[:made].tolist(), max_new, eos)

