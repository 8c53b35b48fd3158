"""Batched greedy speculative decoding: every row equals its own single-prompt run, token for token and round
for round, however differently the rows accept and wherever they stop."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tiny_models import make_llama

from inference.decoding.draft_model import DraftConfig, Eagle3Draft
from inference.decoding.hidden_states import AuxLayers
from inference.decoding.spec_batch import BatchedGreedyBaseline, BatchedGreedyRounds
from inference.decoding.spec_graph import GreedyRoundGraph
from inference.decoding.speculative import RoundCounts
from training.accept import target_greedy

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


@pytest.mark.parametrize("eos", [set(), {7}])
def test_continuous_batching_refills_rows_and_equals_single_prompt_rounds(eos: set[int]) -> None:
    """More prompts than rows: each finished row takes the next prompt between two rounds, and every prompt still
    decodes exactly as it does alone, token for token and round for round."""
    target, draft = _pair()
    k, max_new = 3, 20
    prompts = [*PROMPTS, [1, 30, 31], [1, 2, 3, 4, 5, 6], [1, 11]]
    max_len = max(map(len, prompts)) + max_new + k + 2
    single = GreedyRoundGraph(target, draft, LAYERS, k=k, max_len=max_len, use_graph=False)
    alone = [RoundCounts() for _ in prompts]
    expected = [single.decode(p, max_new, eos, c) for p, c in zip(prompts, alone, strict=True)]
    batched = BatchedGreedyRounds(target, draft, LAYERS, batch=3, k=k, max_len=max_len, use_graph=False)
    together = [RoundCounts() for _ in prompts]
    finished: list[int] = []
    got = batched.decode(prompts, max_new, eos, together, on_done=finished.append)
    assert got == expected
    for a, b in zip(alone, together, strict=True):
        assert (a.rounds, a.tokens, a.attempted, a.accepted) == (b.rounds, b.tokens, b.attempted, b.accepted)
    assert sorted(finished) == list(range(len(prompts)))
    # Refilled, not grouped: fewer batch rounds than running the prompts in static groups of three.
    assert batched.replays < sum(max(c.rounds for c in together[i : i + 3]) for i in range(0, len(prompts), 3))


@pytest.mark.parametrize("eos", [set(), {7}])
def test_continuous_baseline_refills_rows_and_equals_the_target_greedy_output(eos: set[int]) -> None:
    target, _ = _pair()
    prompts = [*PROMPTS, [1, 30, 31], [1, 2, 3, 4, 5, 6]]
    base = BatchedGreedyBaseline(target, batch=2, max_len=40, use_graph=False, sync_every=3)
    finished: list[int] = []
    got = base.decode(prompts, 16, eos, on_done=finished.append)
    assert got == [target_greedy(target, p, 16, eos) for p in prompts]
    assert sorted(finished) == list(range(len(prompts)))
    # Without an end-of-sequence every prompt makes exactly 16 tokens: 15 decode steps each, two rows at a time,
    # and no step is spent on a row that has finished.
    if not eos:
        assert base.steps == 15 * -(-len(prompts) // 2)


def test_a_bad_prompt_count_is_refused() -> None:
    target, draft = _pair()
    batched = BatchedGreedyRounds(target, draft, LAYERS, batch=2, k=2, max_len=40, use_graph=False)
    with pytest.raises(ValueError, match="at least one prompt"):
        batched.decode([], 4, set(), [])
    with pytest.raises(ValueError, match="one RoundCounts each"):
        batched.decode(PROMPTS[:3], 4, set(), [RoundCounts()])


def test_the_evaluator_at_batch_b_counts_what_batch_1_counts() -> None:
    from training.accept import evaluate

    target, draft = _pair()
    seen: list[int] = []
    one = evaluate(target, draft, LAYERS, PROMPTS, max_new=16, k=3, eos={7}, use_graph=False)
    many = evaluate(target, draft, LAYERS, PROMPTS, max_new=16, k=3, eos={7}, use_graph=False, batch=2,
                    on_prompt=seen.append)
    assert many.identical and one.identical and many.batch == 2 and many.prompts == 5
    assert sorted(seen) == [0, 1, 2, 3, 4] and many.as_dict()["schedule"] == "continuous"
    assert (many.rounds, many.tokens, many.attempted, many.accepted) == (one.rounds, one.tokens, one.attempted,
                                                                           one.accepted)
    assert many.round_steps < many.rounds  # a batch round serves every live row at once
    assert many.round_cost > 0 and many.as_dict()["break_even_accept_length"] == round(many.round_cost, 3)
    assert many.break_even().startswith(f"AL {many.accept_length:.2f} vs break-even")


def test_static_and_continuous_schedules_count_the_same_rounds_in_fewer_batch_steps() -> None:
    from training.accept import evaluate

    target, draft = _pair()
    static = evaluate(target, draft, LAYERS, PROMPTS, max_new=16, k=3, eos=set(), use_graph=False, batch=2,
                      schedule="static")
    continuous = evaluate(target, draft, LAYERS, PROMPTS, max_new=16, k=3, eos=set(), use_graph=False, batch=2)
    assert static.identical and continuous.identical and static.as_dict()["schedule"] == "static"
    assert (static.rounds, static.accepted) == (continuous.rounds, continuous.accepted)
    assert continuous.round_steps <= static.round_steps
    with pytest.raises(ValueError, match="schedule must be one of"):
        evaluate(target, draft, LAYERS, PROMPTS, max_new=4, k=2, use_graph=False, batch=2, schedule="greedy")


def test_the_evaluator_refuses_a_sampled_batch() -> None:
    from training.accept import evaluate

    target, draft = _pair()
    with pytest.raises(ValueError, match="greedy"):
        evaluate(target, draft, LAYERS, PROMPTS, max_new=4, k=2, temperature=0.7, use_graph=False, batch=2)
