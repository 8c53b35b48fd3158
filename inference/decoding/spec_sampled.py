"""Speculative sampling with every round in one CUDA graph: the greedy round's program, sampling instead of argmax.

`SampledRoundGraph` is `inference.decoding.spec_graph.GreedyRoundGraph` with two steps changed, the rest (static caches,
verify, draft update, one host read a round) shared:

* each chain step samples its draft token from q = softmax(draft logits / T) over the draft vocab;
* the verify applies the exact speculative sampling rule: draft i stands when u_i < min(1, p_i(d_i) / q_i(d_i))
  (p = softmax(target logits / T)); the token after the a drafts that stand is drawn from
  normalise(max(p_a - q_a, 0)), or from p_k when all k stood (the same rule as `inference.decoding.speculative`).

Randomness is the one thing a graph cannot draw by itself from the host's generator: before each round the host
fills a static buffer with 2k + 1 uniforms from its seeded generator (k for the chain, k for the tests, one
for the token after), and every draw inside the round is an inverse-CDF lookup of one of them (the first index
whose cumulative probability exceeds u * total). So the output is distributed exactly as the target's own
sampling, the run is reproducible from its seed, and without CUDA the same code runs eagerly (tested on CPU).

`SampledBaseline` is the target alone sampling at T over its graph-replayed decode step, noise pre-drawn the
same way and tokens kept on the device: the baseline a sampled speedup is measured against.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from inference.decoding.draft_model import Eagle3Draft
from inference.decoding.hidden_states import AuxLayers
from inference.decoding.spec_graph import GreedyRoundGraph
from inference.decoding.speculative import cut_output
from inference.decoding.static_llama import DecodeGraph, StaticLlama


def inverse_cdf(probs: Tensor, u: Tensor) -> Tensor:
    """One index per row of probs [..., V] (unnormalised is fine) drawn with the uniform u [...] in [0, 1)."""
    cdf = probs.float().cumsum(-1)
    x = (u * cdf[..., -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, x, right=True).squeeze(-1)
    return idx.clamp(max=probs.shape[-1] - 1)


def accept_sampled(proposals: Tensor, q: Tensor, p: Tensor, u_test: Tensor, u_next: Tensor) -> tuple[Tensor, Tensor]:
    """The speculative sampling rule for one round, on the device: (drafts accepted [], the token after them [1]).

    proposals [k] (target ids), q [k, V] the draft's distributions they came from (zero outside the draft vocab),
    p [k+1, V] the target's, u_test [k] and u_next [] uniforms in [0, 1).
    """
    k = proposals.shape[0]
    p_tok = p[:k].gather(1, proposals[:, None])[:, 0]
    q_tok = q.gather(1, proposals[:, None])[:, 0]
    stands = u_test < torch.clamp(p_tok / q_tok.clamp(min=1e-30), max=1.0)
    accepted = torch.cumprod(stands.long(), 0).sum()
    q_after = torch.cat([q, torch.zeros_like(q[:1])])  # after all k stood: p_k itself
    p_a = p.index_select(0, accepted.view(1))[0]
    residual = torch.clamp(p_a - q_after.index_select(0, accepted.view(1))[0], min=0)
    total = residual.sum()
    dist = torch.where(total > 0, residual, p_a)  # inverse_cdf normalises
    return accepted, inverse_cdf(dist, u_next).view(1)


class SampledRoundGraph(GreedyRoundGraph):
    """One sampled round over static buffers (`decode` as the greedy round's); randomness from `generator`."""

    def __init__(self, target: Any, draft: Eagle3Draft, layers: AuxLayers, *, k: int, max_len: int,
                 temperature: float, generator: torch.Generator, use_graph: bool = True) -> None:
        if temperature <= 0:
            raise ValueError(f"sampled rounds need a temperature above 0, not {temperature}")
        dev = next(target.parameters()).device
        self.temperature, self.generator = temperature, generator
        self.noise = torch.zeros(2 * k + 1, device=dev)  # refilled before every round: chain, tests, next token
        vocab_d = draft.lm_head.weight.shape[0]
        self.d2t_index = draft.draft_to_target(torch.arange(vocab_d, device=dev))
        self.vocab = draft.embed_tokens.weight.shape[0]
        self.q: list[Tensor] = []
        super().__init__(target, draft, layers, k=k, max_len=max_len, use_graph=use_graph)

    def _pick(self, j: int, draft_logits: Tensor) -> Tensor:
        if j == 0:
            self.q = []
        q_d = torch.softmax(draft_logits.float() / self.temperature, -1)
        q = torch.zeros(self.vocab, device=q_d.device).index_copy(0, self.d2t_index, q_d)
        self.q.append(q)
        return self.draft.draft_to_target(inverse_cdf(q_d, self.noise[j]).view(1))

    def _accept(self, proposals: Tensor, logits: Tensor) -> tuple[Tensor, Tensor]:
        p = torch.softmax(logits.float() / self.temperature, -1)
        k = self.k
        return accept_sampled(proposals, torch.stack(self.q), p, self.noise[k : 2 * k], self.noise[2 * k])

    def _first_token(self, logits: Tensor) -> Tensor:
        p = torch.softmax(logits.float() / self.temperature, -1)
        u = torch.rand((), generator=self.generator, device=p.device)
        return inverse_cdf(p, u).view(1)

    def _before_round(self) -> None:
        self.noise.copy_(torch.rand(self.noise.shape, generator=self.generator, device=self.noise.device))


class SampledBaseline:
    """The target alone sampling at `temperature`: graph-replayed decode step, noise pre-drawn, tokens on the device."""

    def __init__(self, target: Any, *, max_len: int, temperature: float, generator: torch.Generator,
                 use_graph: bool = True, sync_every: int = 16) -> None:
        self.runner = StaticLlama(target, slots=1, max_len=max_len)
        self.graph = DecodeGraph(self.runner, use_graph=use_graph)
        self.temperature, self.generator = temperature, generator
        self.sync_every, self.device = sync_every, self.runner.embed.device

    @torch.no_grad()
    def decode(self, prompt: list[int], max_new: int, eos: set[int]) -> list[int]:
        """A sampled continuation of prompt (eos included)."""
        n = len(prompt)
        logits, _ = self.runner.forward(torch.tensor([prompt], device=self.device),
                                        torch.arange(n, device=self.device)[None],
                                        slots=torch.zeros(1, dtype=torch.long, device=self.device), prefill=True)
        noise = torch.rand(max_new, generator=self.generator, device=self.device)
        token = inverse_cdf(torch.softmax(logits[0, -1].float() / self.temperature, -1), noise[0]).view(1, 1)
        out = torch.zeros(max_new, dtype=torch.long, device=self.device)
        out[0] = token[0, 0]
        position = torch.full((1, 1), n, dtype=torch.long, device=self.device)
        made = 1
        while made < max_new:
            for _ in range(min(self.sync_every, max_new - made)):
                step = self.graph.step(token, position)
                token = inverse_cdf(torch.softmax(step.float() / self.temperature, -1), noise[made : made + 1])
                token = token.view(1, 1)
                out[made] = token[0, 0]
                position = position + 1
                made += 1
            if any(t in eos for t in out[:made].tolist()):
                break
        return cut_output(out[:made].tolist(), max_new, eos)
