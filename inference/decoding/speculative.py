"""Local speculative decoding with KV caches for target and draft: one loop, a pluggable acceptance rule.

A round (chain of k): the draft proposes d_1..d_k from the target's aux states, reading its own KV cache of
step-0 keys for every position already verified plus the keys of this round's chain; the target scores
[last token, d_1..d_k] in one forward over its static KV cache; the rule decides how many drafts stand and
which token follows them. Rejected positions need no clean-up: both caches are indexed by position, and the
next round overwrites them before anything can read them.

Rules. `GreedyRule`: d_i is the draft's argmax and stands while it equals the target's argmax; the target's
choice after the last accepted draft is the bonus token, so the output is exactly the target's greedy output.
`SamplingRule` (speculative sampling): d_i ~ q_i; it stands with probability min(1, p_i(d_i) / q_i(d_i)); the
first rejection is replaced by a sample of norm(max(0, p_i - q_i)); after k acceptances the bonus token is
sampled from p_{k+1}: the output is distributed exactly as the target's own sampling.

The target side is a `TargetRunner`: `CachedLlama` (static cache; the verify step and the baseline's decode
step replayed as CUDA graphs on a GPU) for Llama-family targets, `FullRecompute` (the whole sequence again
each round, any `transformers` model) for the rest. `target_decode` is the baseline: the same runner, one
token per forward, so the speedup compares like with like.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from inference.decoding.draft_model import Eagle3Draft
from inference.decoding.hidden_states import AuxLayers, capture
from inference.decoding.static_llama import DecodeGraph, StaticLlama, UnsupportedTarget


@dataclass
class RoundCounts:
    """Verification rounds, tokens, and per-position attempts/acceptances (position i given 1..i-1 stood)."""

    rounds: int = 0
    tokens: int = 0
    attempted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    def record(self, accepted: int, k: int, emitted: int) -> None:
        """Count one round: positions 1..accepted+1 were tried (up to k), `emitted` tokens kept."""
        if len(self.attempted) != k:
            self.attempted, self.accepted = [0] * k, [0] * k
        for i in range(min(accepted + 1, k)):
            self.attempted[i] += 1
            self.accepted[i] += int(i < accepted)
        self.rounds += 1
        self.tokens += emitted


# --- acceptance rules ----------------------------------------------------------------------------------------
class AcceptRule(Protocol):
    def pick(self, draft_logits: Tensor) -> tuple[Tensor, Tensor | None]:
        """A draft-vocab id from the draft's logits, and the distribution it came from (None if greedy)."""

    def verify(self, proposed: list[int], q: list[Tensor | None], target_logits: Tensor) -> tuple[int, int]:
        """(drafts accepted, the token that follows them) given the target's logits [k+1, V]."""

    def first(self, logits: Tensor) -> int:
        """The target's own next token from its logits [V] (prefill and baseline decoding)."""


class GreedyRule:
    """Greedy chain: the output equals the target's greedy output."""

    def pick(self, draft_logits: Tensor) -> tuple[Tensor, Tensor | None]:
        return draft_logits.argmax(), None

    def verify(self, proposed: list[int], q: list[Tensor | None], target_logits: Tensor) -> tuple[int, int]:
        preds = target_logits.argmax(-1).tolist()
        accepted = 0
        while accepted < len(proposed) and proposed[accepted] == preds[accepted]:
            accepted += 1
        return accepted, preds[accepted]

    def first(self, logits: Tensor) -> int:
        return int(logits.argmax())


class SamplingRule:
    """Speculative sampling at `temperature` (> 0) with a seeded generator."""

    def __init__(self, temperature: float, generator: torch.Generator) -> None:
        self.temperature, self.generator = temperature, generator

    def pick(self, draft_logits: Tensor) -> tuple[Tensor, Tensor | None]:
        q = torch.softmax(draft_logits.float() / self.temperature, -1)
        return torch.multinomial(q, 1, generator=self.generator)[0], q

    def verify(self, proposed: list[int], q: list[Tensor | None], target_logits: Tensor) -> tuple[int, int]:
        p = torch.softmax(target_logits.float() / self.temperature, -1)
        q_full = torch.stack([x for x in q if x is not None])
        return verify_sampled(proposed, q_full, p, self.generator)

    def first(self, logits: Tensor) -> int:
        p = torch.softmax(logits.float() / self.temperature, -1)
        return int(torch.multinomial(p, 1, generator=self.generator)[0])


def verify_sampled(proposed: list[int], q: Tensor, p: Tensor, generator: torch.Generator) -> tuple[int, int]:
    """The speculative sampling rule for one round: (drafts accepted, the token that follows them).

    proposed: k draft tokens; q [k, V]: the draft's distributions they were sampled from (zero outside the draft
    vocab); p [k+1, V]: the target's distributions after the context and after each draft token.
    """
    for i, token in enumerate(proposed):
        ratio = float(p[i, token]) / max(float(q[i, token]), 1e-30)
        if float(torch.rand((), generator=generator, device=p.device)) < min(1.0, ratio):
            continue
        residual = torch.clamp(p[i] - q[i], min=0)
        total = float(residual.sum())
        residual = residual / total if total > 0 else p[i]
        return i, int(torch.multinomial(residual, 1, generator=generator)[0])
    return len(proposed), int(torch.multinomial(p[len(proposed)], 1, generator=generator)[0])


# --- target runners ------------------------------------------------------------------------------------------
class TargetRunner(Protocol):
    def prefill(self, prompt: list[int]) -> tuple[Tensor, Tensor]:
        """Logits [n, V] and aux [n, 3H] of the prompt (the cache now holds it)."""

    def extend(self, tokens: list[int], start: int) -> tuple[Tensor, Tensor]:
        """Logits and aux of `tokens` placed at positions start.. (the cache holds positions < start)."""

    def decode(self, token: int, position: int) -> Tensor:
        """Logits [V] after one token at `position` (the baseline's step)."""


class CachedLlama:
    """A Llama-family target over a one-slot static cache; verify and decode steps as CUDA graphs on a GPU."""

    def __init__(self, target: Any, layers: AuxLayers, max_len: int, k: int, *, use_graph: bool = True) -> None:
        self.runner = StaticLlama(target, slots=1, max_len=max_len)
        self.aux_ids = layers.as_input().ids
        self.device = self.runner.embed.device
        self.verify_graph = DecodeGraph(self.runner, use_graph=use_graph, width=k + 1, aux_ids=self.aux_ids)
        self.decode_graph = DecodeGraph(self.runner, use_graph=use_graph)
        self.k = k

    def prefill(self, prompt: list[int]) -> tuple[Tensor, Tensor]:
        x = torch.tensor([prompt], device=self.device)
        logits, aux = self.runner.forward(x, torch.arange(len(prompt), device=self.device)[None],
                                          slots=torch.zeros(1, dtype=torch.long, device=self.device),
                                          prefill=True, aux_ids=self.aux_ids)
        assert aux is not None
        return logits[0], aux[0]

    def extend(self, tokens: list[int], start: int) -> tuple[Tensor, Tensor]:
        n = len(tokens)
        if n == self.k + 1:
            padded = torch.tensor([tokens], device=self.device)
            positions = torch.arange(start, start + n, device=self.device)[None]
            logits, aux = self.verify_graph.run(padded, positions)
        else:  # a shorter block (near the end of max_len): eager
            logits, aux = self.runner.forward(torch.tensor([tokens], device=self.device),
                                              torch.arange(start, start + n, device=self.device)[None],
                                              aux_ids=self.aux_ids)
        assert aux is not None
        return logits[0], aux[0]

    def decode(self, token: int, position: int) -> Tensor:
        logits = self.decode_graph.step(torch.tensor([[token]], device=self.device),
                                        torch.tensor([[position]], device=self.device))
        return logits[0]


class FullRecompute:
    """Any `transformers` target: each call recomputes the whole sequence (correct, slow; no cache)."""

    def __init__(self, target: Any, layers: AuxLayers) -> None:
        self.target, self.layers = target, layers
        self.device = next(target.parameters()).device
        self.seq: list[int] = []

    def _run(self) -> tuple[Tensor, Tensor]:
        x = torch.tensor([self.seq], device=self.device)
        states = capture(self.target, x, torch.ones_like(x), self.layers)
        return states.logits[0], states.aux[0]

    def prefill(self, prompt: list[int]) -> tuple[Tensor, Tensor]:
        self.seq = list(prompt)
        return self._run()

    def extend(self, tokens: list[int], start: int) -> tuple[Tensor, Tensor]:
        self.seq = self.seq[:start] + list(tokens)
        logits, aux = self._run()
        return logits[start:], aux[start:]

    def decode(self, token: int, position: int) -> Tensor:
        self.seq = [*self.seq[:position], token]
        return self._run()[0][-1]


def target_runner(target: Any, layers: AuxLayers, max_len: int, k: int, *, use_graph: bool = True) -> TargetRunner:
    """The fastest runner this target allows: static cache for Llama-family models, else full recompute."""
    try:
        return CachedLlama(target, layers, max_len, k, use_graph=use_graph)
    except UnsupportedTarget:
        return FullRecompute(target, layers)


# --- the draft's cache ---------------------------------------------------------------------------------------
class DraftCache:
    """Step-0 keys/values of every verified position, preallocated; a round's chain keys live beside it."""

    def __init__(self, draft: Eagle3Draft, max_len: int, device: torch.device) -> None:
        attn = draft.midlayer.self_attn
        dtype = draft.fc.weight.dtype
        self.draft, self.length = draft, 0
        self.k = torch.zeros(1, attn.heads, max_len, attn.head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.hidden: Tensor | None = None  # step-0 output at the newest position: where a chain starts

    def advance(self, aux: Tensor, next_tokens: list[int]) -> None:
        """Add positions length..length+m-1: their aux states [m, 3H] and the tokens that follow them."""
        draft, m = self.draft, aux.shape[0]
        layer = draft.midlayer
        positions = torch.arange(self.length, self.length + m, device=aux.device)
        hidden = draft.fc(aux[None].to(draft.fc.weight.dtype))
        embeds = draft.embed_tokens(torch.tensor([next_tokens], device=aux.device)).to(hidden.dtype)
        q, k, v = layer.project(embeds, hidden, positions)
        end = self.length + m
        self.k[:, :, self.length : end], self.v[:, :, self.length : end] = k, v
        # Only the newest position's output is needed (older ones started chains already).
        scores = (q[:, :, -1:] @ self.k[:, :, :end].transpose(-1, -2)).float() / q.shape[-1] ** 0.5
        out = torch.softmax(scores, -1).to(q.dtype) @ self.v[:, :, :end]
        self.hidden = layer.finish(out.transpose(1, 2).reshape(1, 1, -1), residual=hidden[:, -1:])
        self.length = end

    def chain(self, k: int, rule: AcceptRule) -> tuple[list[int], list[Tensor | None]]:
        """Propose k target-vocab tokens from the newest position; the chain's own keys are discarded after."""
        draft, layer = self.draft, self.draft.midlayer
        assert self.hidden is not None
        n = self.length
        hidden = self.hidden
        token_d, q_dist = rule.pick(draft.logits(hidden)[0, -1])
        token = draft.draft_to_target(token_d)
        proposed, dists = [int(token)], [_to_target_vocab(draft, q_dist)]
        chain_k: list[Tensor] = []
        chain_v: list[Tensor] = []
        for j in range(1, k):
            pos = torch.tensor([n - 1 + j], device=hidden.device)  # the chain slot's position (TTT step j)
            q, kj, vj = layer.project(draft.embed_tokens(token.view(1, 1)).to(hidden.dtype), hidden, pos)
            chain_k.append(kj)
            chain_v.append(vj)
            keys = torch.cat([self.k[:, :, :n], *chain_k], 2)
            values = torch.cat([self.v[:, :, :n], *chain_v], 2)
            weights = torch.softmax((q @ keys.transpose(-1, -2)).float() / q.shape[-1] ** 0.5, -1).to(q.dtype)
            hidden = layer.finish((weights @ values).transpose(1, 2).reshape(1, 1, -1), residual=hidden)
            token_d, q_dist = rule.pick(draft.logits(hidden)[0, -1])
            token = draft.draft_to_target(token_d)
            proposed.append(int(token))
            dists.append(_to_target_vocab(draft, q_dist))
        return proposed, dists


def _to_target_vocab(draft: Eagle3Draft, q: Tensor | None) -> Tensor | None:
    """A draft-vocab distribution spread over the target vocab (zero outside the draft vocab)."""
    if q is None:
        return None
    full = torch.zeros(draft.embed_tokens.weight.shape[0], device=q.device)
    full[draft.draft_to_target(torch.arange(q.shape[0], device=q.device))] = q
    return full


# --- the loop ------------------------------------------------------------------------------------------------
@torch.no_grad()
def speculative_decode(target: TargetRunner, draft: Eagle3Draft, prompt: list[int], max_new: int, k: int,
                       eos: set[int], rule: AcceptRule, counts: RoundCounts, max_len: int) -> list[int]:
    """Decode one prompt speculatively; rounds go into counts; returns the new tokens (eos included)."""
    logits, aux = target.prefill(prompt)
    out = [rule.first(logits[-1])]
    cache = DraftCache(draft, max_len, aux.device)
    cache.advance(aux, prompt[1:] + out)  # position t reads the token after it
    while len(out) < max_new and out[-1] not in eos:
        proposed, dists = cache.chain(k, rule)
        start = len(prompt) + len(out) - 1  # the last token's position: the verify block starts there
        logits, aux = target.extend([out[-1], *proposed], start)
        accepted, following = rule.verify(proposed, dists, logits)
        new = proposed[:accepted]
        stop = next((i for i, t in enumerate(new) if t in eos), None)
        if stop is not None:  # an accepted end-of-sequence ends the output: no bonus token
            accepted, new = stop + 1, new[: stop + 1]
        else:
            new.append(following)
        remaining = max_new - len(out)
        new = new[:remaining]
        counts.record(min(accepted, remaining), k, len(new))  # drafts past max_new emit nothing: not counted
        out += new
        if len(out) < max_new and out[-1] not in eos:
            # Verified positions start..start+accepted have final aux states; each reads the token after it.
            cache.advance(aux[: accepted + 1], new[: accepted + 1])
    return cut_output(out, max_new, eos)


@torch.no_grad()
def target_decode(target: TargetRunner, prompt: list[int], max_new: int, eos: set[int], rule: AcceptRule
                  ) -> list[int]:
    """The target alone, one token per forward over the same cache: the baseline (and the reference output)."""
    logits, _ = target.prefill(prompt)
    out = [rule.first(logits[-1])]
    while len(out) < max_new and out[-1] not in eos:
        out.append(rule.first(target.decode(out[-1], len(prompt) + len(out) - 1)))
    return cut_output(out, max_new, eos)


def cut_output(out: list[int], max_new: int, eos: set[int]) -> list[int]:
    """The tokens up to max_new, ending at the first end-of-sequence token where there is one."""
    out = out[:max_new]
    stop = next((i for i, t in enumerate(out) if t in eos), None)
    return out if stop is None else out[: stop + 1]
