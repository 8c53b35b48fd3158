"""Speculative decoding for acceptance length: output identical to the target, counts that add up."""

from __future__ import annotations

from typing import Any

import torch
from tiny_models import make_llama

from training.accept import AcceptReport, evaluate_acceptance, speculative_generate, target_greedy
from training.draft_model import DraftConfig, Eagle3Draft
from training.hidden_states import AuxLayers


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
    import training.accept as accept

    target, draft = _pair()
    prompt = [1, 5, 6, 7]
    truth = target_greedy(target, prompt, 40, set())

    def oracle(draft: Any, seq: torch.Tensor, aux: torch.Tensor, k: int) -> list[int]:
        done = seq.shape[1] - len(prompt)
        return truth[done : done + k]

    monkeypatch.setattr(accept, "draft_chain", oracle)
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
