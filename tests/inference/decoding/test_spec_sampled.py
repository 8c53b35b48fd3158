"""Sampled rounds (the graph's program, run eagerly on CPU): distributed exactly as the target's own sampling."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from test_spec_batch import LAYERS, _pair

from inference.decoding.spec_sampled import SampledBaseline, SampledRoundGraph, accept_sampled
from inference.decoding.speculative import RoundCounts, SamplingRule, target_decode, target_runner

PROMPT = [1, 5, 6]


def _tv(a: Counter[tuple[int, ...]], b: Counter[tuple[int, ...]]) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[x] / na - b[x] / nb) for x in set(a) | set(b))


def test_the_accept_rule_emits_the_target_distribution() -> None:
    """Whatever the draft's q, the first emitted token is distributed as p (20k trials, noise as the graph gets it)."""
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]])
    q = torch.tensor([[0.1, 0.6, 0.1, 0.2]])
    gen = torch.Generator().manual_seed(0)
    trials, counts, accepted = 20000, torch.zeros(4), 0
    for _ in range(trials):
        u = torch.rand(3, generator=gen)
        drafted = int(torch.searchsorted(q[0].cumsum(0), u[0:1] * q[0].sum(), right=True)[0])
        n, following = accept_sampled(torch.tensor([drafted]), q, p, u[1:2], u[2])
        counts[drafted if int(n) == 1 else int(following[0])] += 1
        accepted += int(n)
    assert torch.allclose(counts / trials, p[0], atol=0.015), counts / trials
    assert abs(accepted / trials - 0.55) < 0.015  # sum(min(p, q)) = 0.1 + 0.3 + 0.1 + 0.05


def test_sampled_rounds_are_distributed_as_the_target_sampling() -> None:
    target, draft = _pair()
    gen = torch.Generator()
    rounds = SampledRoundGraph(target, draft, LAYERS, k=3, max_len=20, temperature=1.0, generator=gen,
                               use_graph=False)
    base = SampledBaseline(target, max_len=20, temperature=1.0, generator=gen, use_graph=False)
    runner = target_runner(target, LAYERS, 20, 3, use_graph=False)
    spec, alone, reference = Counter[tuple[int, ...]](), Counter[tuple[int, ...]](), Counter[tuple[int, ...]]()
    accepted = rejected = 0
    n = 800
    for i in range(n):
        gen.manual_seed(i)
        counts = RoundCounts()
        spec[tuple(rounds.decode(PROMPT, 4, set(), counts)[:3])] += 1
        accepted += sum(counts.accepted)
        rejected += sum(counts.attempted) - sum(counts.accepted)
        gen.manual_seed(100_000 + i)
        alone[tuple(base.decode(PROMPT, 4, set())[:3])] += 1
        gen.manual_seed(200_000 + i)
        reference[tuple(target_decode(runner, PROMPT, 4, set(), SamplingRule(1.0, gen))[:3])] += 1
    assert len(reference) >= 4  # a spread distribution, not one continuation
    assert accepted > 20 and rejected > 20  # both branches of the rule were taken
    assert _tv(spec, reference) < 0.08, (spec.most_common(6), reference.most_common(6))
    assert _tv(alone, reference) < 0.08, (alone.most_common(6), reference.most_common(6))


def test_a_seed_reproduces_the_run_and_greedy_temperatures_are_refused() -> None:
    target, draft = _pair()
    gen = torch.Generator()
    rounds = SampledRoundGraph(target, draft, LAYERS, k=3, max_len=40, temperature=0.7, generator=gen,
                               use_graph=False)
    runs = []
    for _ in range(2):
        gen.manual_seed(7)
        runs.append(rounds.decode(PROMPT, 20, set(), RoundCounts()))
    assert runs[0] == runs[1] and len(runs[0]) == 20
    with pytest.raises(ValueError, match="temperature above 0"):
        SampledRoundGraph(target, draft, LAYERS, k=3, max_len=40, temperature=0.0, generator=gen, use_graph=False)
