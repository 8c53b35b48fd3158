"""Batched greedy speculative decoding: every row equals its own single-prompt run, token for token and round
for round, however differently the rows accept and wherever they stop."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tiny_models import make_llama

from training.accept import target_greedy
from training.draft_model import DraftConfig, Eagle3Draft
from training.hidden_states import AuxLayers
from training.spec_batch import BatchedGreedyBaseline, BatchedGreedyRounds
from training.spec_graph import GreedyRoundGraph
from training.speculative import RoundCounts

LAYERS = AuxLayers((1, 2, 3), "input")
PROMPTS = [[1, 5, 6, 7], [1, 9, 3], [1, 4, 4, 8, 12, 30, 2], [1, 22], [1, 17, 18, 19, 5]]


def _pair(vocab: int = 40) -> tuple[Any, Eagle3Draft]:
    target = make_llama(vocab, layers=4)
    torch.manual_seed(3)
    draft = Eagle3Draft(DraftConfig(hidden_size=64, intermediate_size=64, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=vocab, draft_vocab_size=vocab,
                                    target_hidden_size=64))
    draft.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    draft.set_vocab(torch.zeros(vocab, dtype=torch.long), torch.ones(vocab, dtype=torch.bool))
    return target, draft.eval()


@pytest.mark.parametrize("eos", [set(), {7}])
def test_batched_rounds_equal_single_prompt_rounds(eos: set[int]) -> None:
    target, draft = _pair()
    k, max_new = 3, 20
    max_len = max(map(len, PROMPTS)) + max_new + k + 2
    single = GreedyRoundGraph(target, draft, LAYERS, k=k, max_len=max_len, use_graph=False)
    alone = [RoundCounts() for _ in PROMPTS]
    expected = [single.decode(p, max_new, eos, c) for p, c in zip(PROMPTS, alone, strict=True)]
    batched = BatchedGreedyRounds(target, draft, LAYERS, batch=3, k=k, max_len=max_len, use_graph=False)
    together = [RoundCounts() for _ in PROMPTS]
    got = batched.decode(PROMPTS[:3], max_new, eos, together[:3]) + batched.decode(PROMPTS[3:], max_new, eos,
                                                                                   together[3:])
    assert got == expected
    assert got == [target_greedy(target, p, max_new, eos) for p in PROMPTS]
    for a, b in zip(alone, together, strict=True):
        assert (a.rounds, a.tokens, a.attempted, a.accepted) == (b.rounds, b.tokens, b.attempted, b.accepted)
    assert len({c.rounds for c in together}) > 1  # rows accepted differently: the batch was ragged
    assert sum(sum(c.accepted) for c in together) > 0  # and drafts were accepted, so positions moved unevenly


def test_batched_baseline_is_the_target_greedy_output_per_row() -> None:
    target, _ = _pair()
    eos = {7}
    base = BatchedGreedyBaseline(target, batch=4, max_len=40, use_graph=False, sync_every=3)
    assert base.decode(PROMPTS[:3], 16, eos) == [target_greedy(target, p, 16, eos) for p in PROMPTS[:3]]


def test_too_many_prompts_for_the_batch_is_refused() -> None:
    target, draft = _pair()
    batched = BatchedGreedyRounds(target, draft, LAYERS, batch=2, k=2, max_len=40, use_graph=False)
    with pytest.raises(ValueError, match="between 1 and 2"):
        batched.decode(PROMPTS[:3], 4, set(), [RoundCounts() for _ in range(3)])


def test_the_evaluator_at_batch_b_counts_what_batch_1_counts() -> None:
    from training.accept import evaluate

    target, draft = _pair()
    seen: list[int] = []
    one = evaluate(target, draft, LAYERS, PROMPTS, max_new=16, k=3, eos={7}, use_graph=False)
    many = evaluate(target, draft, LAYERS, PROMPTS, max_new=16, k=3, eos={7}, use_graph=False, batch=2,
                    on_prompt=seen.append)
    assert many.identical and one.identical and many.batch == 2 and many.prompts == 5 and seen == [0, 1, 2, 3, 4]
    assert (many.rounds, many.tokens, many.attempted, many.accepted) == (one.rounds, one.tokens, one.attempted,
                                                                           one.accepted)
    assert many.round_steps < many.rounds  # a batch round serves every live row at once
    assert many.round_cost > 0 and many.as_dict()["break_even_accept_length"] == round(many.round_cost, 3)
    assert many.break_even().startswith(f"AL {many.accept_length:.2f} vs break-even")


def test_the_evaluator_refuses_a_sampled_batch() -> None:
    from training.accept import evaluate

    target, draft = _pair()
    with pytest.raises(ValueError, match="greedy"):
        evaluate(target, draft, LAYERS, PROMPTS, max_new=4, k=2, temperature=0.7, use_graph=False, batch=2)
