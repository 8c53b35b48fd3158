"""GPU paths (skipped without CUDA): bf16 autocast training and export, and the fused TTT attention on CUDA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from inference.decoding.draft_model import DraftConfig, Eagle3Draft
from training.config import make_config
from training.trainer import train

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_attention_implementations_agree_on_cuda() -> None:
    torch.manual_seed(0)
    cfg = DraftConfig(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=300, draft_vocab_size=200, target_hidden_size=96)
    draft = Eagle3Draft(cfg).cuda()
    ids, aux = torch.randint(0, 300, (2, 64), device="cuda"), torch.randn(2, 64, 288, device="cuda")
    for a, b in zip(draft(ids, aux, 5, attention="diagonal"), draft(ids, aux, 5, attention="masked_sdpa"),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_bf16_training_on_cuda_exports_a_bf16_draft(tmp_path: Path, llama_dir: Path,
                                                    regenerated_data: dict[str, Path]) -> None:
    cfg = make_config({"data": str(regenerated_data["train"]), "target": str(llama_dir), "out": str(tmp_path),
                       "draft_vocab_size": 150, "ttt_steps": 3, "batch_size": 8, "max_steps": 20, "lr": 3e-3,
                       "device": "cuda", "export_dtype": "bfloat16"})
    result = train(cfg)
    assert result.steps == 20 and result.loss == result.loss
    assert json.loads((result.export_dir / "config.json").read_text())["torch_dtype"] == "bfloat16"


def test_cuda_graph_paths_equal_their_eager_runs(tmp_path: Path, llama_dir: Path,
                                                 regenerated_data: dict[str, Path], tokenizer: object) -> None:
    """The replayed graphs (engine decode step, one-graph speculative round, baseline) compute the eager result."""
    from transformers import AutoModelForCausalLM

    from inference.decoding.continuous import ContinuousEngine, Request
    from inference.decoding.hidden_states import default_aux_layers
    from inference.decoding.spec_graph import GreedyBaseline, GreedyRoundGraph
    from inference.decoding.speculative import RoundCounts
    from inference.decoding.static_llama import StaticLlama

    target = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).cuda().eval()
    prompts = [[1, 3, 9 + i, 40 + 2 * i, 4] for i in range(6)]
    answers = {}
    for graph in (False, True):
        engine = ContinuousEngine(StaticLlama(target, slots=4, max_len=48), {2}, use_graph=graph)
        done = engine.run([Request(p, 20, tag=i) for i, p in enumerate(prompts)])
        answers[graph] = {d.request.tag: d.tokens for d in done}
    assert answers[True] == answers[False]
    layers = default_aux_layers(target.config.num_hidden_layers)
    torch.manual_seed(0)
    vocab = target.config.vocab_size
    draft = Eagle3Draft(DraftConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=vocab, draft_vocab_size=vocab,
                                    target_hidden_size=64)).cuda().eval()
    draft.set_vocab(torch.zeros(vocab, dtype=torch.long).cuda(), torch.ones(vocab, dtype=torch.bool).cuda())
    outs = {}
    for graph in (False, True):
        rounds = GreedyRoundGraph(target, draft, layers, k=3, max_len=40, use_graph=graph)
        base = GreedyBaseline(target, max_len=40, use_graph=graph)
        counts = RoundCounts()
        outs[graph] = [(rounds.decode(p, 20, {2}, counts), base.decode(p, 20, {2})) for p in prompts]
        outs[graph].append((counts.rounds, counts.accepted))
    assert outs[True] == outs[False]
    assert all(spec == alone for spec, alone in outs[True][:-1])


def test_batched_round_graphs_equal_their_eager_runs(llama_dir: Path) -> None:
    """The replayed batched round and batched baseline compute the eager result, row for row."""
    from transformers import AutoModelForCausalLM

    from inference.decoding.hidden_states import default_aux_layers
    from inference.decoding.spec_batch import BatchedGreedyBaseline, BatchedGreedyRounds
    from inference.decoding.speculative import RoundCounts

    target = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).cuda().eval()
    layers = default_aux_layers(target.config.num_hidden_layers)
    vocab = target.config.vocab_size
    torch.manual_seed(0)
    draft = Eagle3Draft(DraftConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=vocab, draft_vocab_size=vocab,
                                    target_hidden_size=64)).cuda().eval()
    draft.set_vocab(torch.zeros(vocab, dtype=torch.long).cuda(), torch.ones(vocab, dtype=torch.bool).cuda())
    prompts = [[1, 3, 9 + i, 40 + 2 * i, 4][: 3 + i % 3] for i in range(5)]
    outs = {}
    for graph in (False, True):
        rounds = BatchedGreedyRounds(target, draft, layers, batch=4, k=3, max_len=40, use_graph=graph)
        base = BatchedGreedyBaseline(target, batch=4, max_len=44, use_graph=graph)
        counts = [RoundCounts() for _ in prompts]
        spec = rounds.decode(prompts[:4], 20, {2}, counts[:4]) + rounds.decode(prompts[4:], 20, {2}, counts[4:])
        alone = base.decode(prompts[:4], 20, {2}) + base.decode(prompts[4:], 20, {2})
        refilled = [RoundCounts() for _ in prompts]  # continuous: the fifth prompt takes the first free row
        spec_refilled = rounds.decode(prompts, 20, {2}, refilled)
        alone_refilled = base.decode(prompts, 20, {2})
        outs[graph] = (spec, alone, [(c.rounds, c.accepted) for c in counts], spec_refilled, alone_refilled,
                       [(c.rounds, c.accepted) for c in refilled])
    assert outs[True] == outs[False]
    assert outs[True][0] == outs[True][1] == outs[True][3] == outs[True][4]
    assert outs[True][2] == outs[True][5]


def test_sampled_round_graph_equals_its_eager_run(llama_dir: Path) -> None:
    """Same seed, same noise: the replayed sampled round emits what the eager one does, token for token."""
    from transformers import AutoModelForCausalLM

    from inference.decoding.hidden_states import default_aux_layers
    from inference.decoding.spec_sampled import SampledBaseline, SampledRoundGraph
    from inference.decoding.speculative import RoundCounts

    target = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).cuda().eval()
    layers = default_aux_layers(target.config.num_hidden_layers)
    vocab = target.config.vocab_size
    torch.manual_seed(0)
    draft = Eagle3Draft(DraftConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=vocab, draft_vocab_size=vocab,
                                    target_hidden_size=64)).cuda().eval()
    draft.set_vocab(torch.zeros(vocab, dtype=torch.long).cuda(), torch.ones(vocab, dtype=torch.bool).cuda())
    outs = {}
    for graph in (False, True):
        gen = torch.Generator(device="cuda")
        rounds = SampledRoundGraph(target, draft, layers, k=3, max_len=40, temperature=0.8, generator=gen,
                                   use_graph=graph)
        base = SampledBaseline(target, max_len=40, temperature=0.8, generator=gen, use_graph=graph)
        runs = []
        for i in range(4):
            gen.manual_seed(i)
            runs.append((rounds.decode([1, 3, 9 + i, 4], 20, {2}, RoundCounts()), base.decode([1, 3, 9 + i], 20, {2})))
        outs[graph] = runs
    assert outs[True] == outs[False]


def test_training_without_cudnn_attention_learns_the_same_on_cuda(tmp_path: Path, llama_dir: Path,
                                                                  regenerated_data: dict[str, Path]) -> None:
    """Leaving cuDNN's fused attention out changes the kernel, not the result: the same steps reach nearly the
    same loss (bf16 kernels differ in rounding only)."""
    losses = {}
    for choice in ("auto", "no-cudnn"):
        cfg = make_config({"data": str(regenerated_data["train"]), "target": str(llama_dir),
                           "out": str(tmp_path / choice), "draft_vocab_size": 150, "ttt_steps": 3,
                           "batch_tokens": 512, "max_steps": 12, "lr": 3e-3, "device": "cuda",
                           "attention_kernels": choice})
        losses[choice] = train(cfg).loss
    assert abs(losses["auto"] - losses["no-cudnn"]) < 0.05 * abs(losses["auto"])
