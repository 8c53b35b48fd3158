"""Speculative decoding for acceptance length: output identical to the target, counts that add up."""

from __future__ import annotations

from typing import Any

import torch
from tiny_models import make_llama

from inference.decoding.draft_model import DraftConfig, Eagle3Draft
from inference.decoding.hidden_states import AuxLayers
from training.accept import AcceptReport, evaluate_acceptance, speculative_generate, target_greedy


def _pair(vocab: int = 40) -> tuple[Any, Eagle3Draft]:
    target = make_llama(vocab, layers=4)
    torch.manual_seed(3)
    draft = Eagle3Draft(DraftConfig(hidden_size=64, intermediate_size=64, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=vocab, draft_vocab_size=vocab,
                                    target_hidden_size=64))
    draft.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    draft.set_vocab(torch.zeros(vocab, dtype=torch.long), torch.ones(vocab, dtype=torch.bool))
    return target, draft


def test_output_is_identical_to_target_greedy_and_counts_add_up() -> None:
    target, draft = _pair()
    prompts = [[1, 5, 6, 7], [1, 9, 3]]
    report = evaluate_acceptance(target, draft, AuxLayers((1, 2, 3), "input"), prompts, max_new=12, k=3)
    assert report.identical and report.prompts == 2
    assert report.tokens == 2 * 11  # 12 new tokens each, minus the prefill's
    assert report.accept_length >= 1.0
    assert report.attempted[0] == report.rounds
    assert all(a <= n for a, n in zip(report.accepted, report.attempted, strict=True))


def test_a_perfect_draft_accepts_k_plus_one_per_round(monkeypatch: Any) -> None:
    from inference.decoding import speculative

    target, draft = _pair()
    prompt = [1, 5, 6, 7]
    truth = target_greedy(target, prompt, 40, set())

    def oracle(cache: Any, k: int, rule: Any) -> tuple[list[int], list[Any]]:
        done = cache.length - len(prompt) + 1  # tokens out so far: the cache holds every position but the last
        return truth[done : done + k], [None] * k

    monkeypatch.setattr(speculative.DraftCache, "chain", oracle)
    report = AcceptReport()
    out = speculative_generate(target, draft, AuxLayers((1, 2, 3), "input"), prompt, 1 + 4 * 5, 3, set(), report)
    assert out == truth[:21]
    assert report.accept_length == 4.0 and report.position_rates == [1.0, 1.0, 1.0]


def test_end_of_sequence_stops_both_decoders_alike() -> None:
    target, draft = _pair()
    prompt = [1, 5, 6, 7]
    free = target_greedy(target, prompt, 12, set())
    eos = {free[4]}
    report = evaluate_acceptance(target, draft, AuxLayers((1, 2, 3), "input"), [prompt], max_new=12, k=3, eos=eos)
    assert report.identical
    assert target_greedy(target, prompt, 12, eos)[-1] in eos


def test_sampling_rule_emits_the_target_distribution() -> None:
    """Whatever the draft's q, the first emitted token is distributed as the target's p (tiny vocab, 20k trials)."""
    from training.accept import verify_sampled

    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]])
    q = torch.tensor([[0.1, 0.6, 0.1, 0.2]])
    gen = torch.Generator().manual_seed(0)
    trials, counts, accepted = 20000, torch.zeros(4), 0
    for _ in range(trials):
        drafted = int(torch.multinomial(q[0], 1, generator=gen)[0])
        n, following = verify_sampled([drafted], q, p, gen)
        counts[drafted if n == 1 else following] += 1
        accepted += n
    empirical = counts / trials
    assert torch.allclose(empirical, p[0], atol=0.015), empirical
    # The acceptance probability is sum(min(p, q)) = 0.1 + 0.3 + 0.1 + 0.05 = 0.55.
    assert abs(accepted / trials - 0.55) < 0.015


def test_kv_cached_decoding_matches_recomputing_everything_and_reports_a_speedup() -> None:
    """The static-cache runner and the full-recompute fallback give the same rounds, counts and output."""
    from inference.decoding.speculative import (
        FullRecompute,
        GreedyRule,
        RoundCounts,
        speculative_decode,
        target_runner,
    )

    target, draft = _pair()
    layers = AuxLayers((1, 2, 3), "input")
    prompt = [1, 5, 6, 7, 11]
    fast, slow = RoundCounts(), RoundCounts()
    cached = target_runner(target, layers, 64, 3, use_graph=False)
    assert not isinstance(cached, FullRecompute)
    a = speculative_decode(cached, draft, prompt, 20, 3, set(), GreedyRule(), fast, 64)
    b = speculative_decode(FullRecompute(target, layers), draft, prompt, 20, 3, set(), GreedyRule(), slow, 64)
    assert a == b and (fast.rounds, fast.accepted, fast.attempted) == (slow.rounds, slow.accepted, slow.attempted)
    report = evaluate_acceptance(target, draft, layers, [prompt], max_new=20, k=3)
    assert report.baseline_tok_s > 0 and report.speculative_tok_s > 0 and report.speedup > 0
    assert "speedup" in report.as_dict() and "accept" in report.summary()


def test_draft_cache_proposes_what_the_ttt_unroll_predicts() -> None:
    """Inference and training agree: the chain from a cached prefix equals TTT steps fed the chain's tokens."""
    from inference.decoding.speculative import DraftCache, GreedyRule

    target, draft = _pair()
    seq = [1, 5, 6, 7, 11, 13, 2, 9]
    x = torch.tensor([seq])
    with torch.no_grad():
        hs = target(input_ids=x, output_hidden_states=True).hidden_states
    aux = torch.cat([hs[1], hs[2], hs[3]], -1)
    n = 5  # positions 0..4 known; the chain starts at position 4 reading seq[5]
    cache = DraftCache(draft, 32, torch.device("cpu"))
    with torch.no_grad():
        cache.advance(aux[0, :n], seq[1 : n + 1])
        proposed, _ = cache.chain(3, GreedyRule())
        # Teacher-force the chain's own proposals into the TTT unroll at position n-1.
        forced = seq[: n + 1] + proposed
        # Positions past n-1 only matter to later queries (causal): their aux can be anything.
        padded = torch.cat([aux[:, :n], torch.zeros(1, len(forced) - n, aux.shape[-1])], 1)
        steps = draft(torch.tensor([forced]), padded, 3)
    ttt = [int(draft.draft_to_target(steps[j][0, n - 1].argmax())) for j in range(3)]
    assert ttt == proposed


def test_sampled_acceptance_near_zero_temperature_matches_greedy() -> None:
    from training.accept import evaluate_sampled_acceptance

    target, draft = _pair()
    prompts = [[1, 5, 6, 7], [1, 9, 3]]
    layers = AuxLayers((1, 2, 3), "input")
    greedy = evaluate_acceptance(target, draft, layers, prompts, max_new=12, k=3)
    cold = evaluate_sampled_acceptance(target, draft, layers, prompts, max_new=12, k=3, temperature=1e-4, seed=1)
    assert (cold.rounds, cold.tokens) == (greedy.rounds, greedy.tokens)
    assert cold.accepted == greedy.accepted and cold.attempted == greedy.attempted
    assert cold.as_dict()["temperature"] == 1e-4 and "identical_to_target_greedy" not in cold.as_dict()
    hot = evaluate_sampled_acceptance(target, draft, layers, prompts, max_new=12, k=3, temperature=1.0, seed=1)
    assert hot.tokens == 2 * 11 and hot.accept_length >= 1.0
    assert all(a <= n for a, n in zip(hot.accepted, hot.attempted, strict=True))
