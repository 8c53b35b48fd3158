"""The static-cache Llama runner computes what transformers computes: prefill, decode steps, verify blocks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))
from tiny_models import make_gemma, make_llama  # noqa: E402

from inference.decoding.attention_kernels import without_cudnn  # noqa: E402
from inference.decoding.static_llama import DecodeGraph, StaticLlama, UnsupportedTarget  # noqa: E402


def _hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_prefill_then_decode_matches_transformers_per_slot() -> None:
    model = make_llama(60, layers=3)
    runner = StaticLlama(model, slots=3, max_len=32)
    prompts = [[1, 5, 9, 11, 7], [1, 4], [1, 8, 8, 3]]
    width = max(map(len, prompts))
    tokens = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    positions = torch.arange(width).expand(3, width)
    logits, _ = runner.forward(tokens, positions, slots=torch.tensor([2, 0, 1]), prefill=True)
    for row, p in enumerate(prompts):
        assert torch.allclose(logits[row, : len(p)], _hf_logits(model, p), atol=1e-4)
    # Two decode steps over all slots (slot s holds prompts[order[s]]); slot lengths differ.
    order = {2: 0, 0: 1, 1: 2}
    seqs = {s: list(prompts[order[s]]) for s in range(3)}
    graph = DecodeGraph(runner, use_graph=False)
    for step in range(2):
        nxt = torch.tensor([[10 + s + step] for s in range(3)])
        pos = torch.tensor([[len(seqs[s])] for s in range(3)])
        out = graph.step(nxt, pos)
        for s in range(3):
            seqs[s].append(int(nxt[s, 0]))
            assert torch.allclose(out[s], _hf_logits(model, seqs[s])[-1], atol=1e-4), (step, s)


@pytest.mark.parametrize("attention", ["sdpa", "matmul"])
def test_verify_block_sees_cache_and_itself_causally_and_returns_aux(attention: str) -> None:
    model = make_llama(60, layers=4)
    runner = StaticLlama(model, slots=1, max_len=40, decode_attention=attention)
    prompt = [1, 5, 9, 11, 7, 3]
    runner.forward(torch.tensor([prompt]), torch.arange(6)[None], slots=torch.tensor([0]), prefill=True)
    # Garbage past the prompt (a rejected block) must not leak: write it, then verify from position 6 again.
    runner.forward(torch.tensor([[40, 41, 42]]), torch.tensor([[6, 7, 8]]))
    block = [12, 13, 14, 15]
    logits, aux = runner.forward(torch.tensor([block]), torch.tensor([[6, 7, 8, 9]]), aux_ids=(1, 2, 3))
    ref = _hf_logits(model, prompt + block)
    assert torch.allclose(logits[0], ref[6:], atol=1e-4)
    with torch.no_grad():
        hs = model(input_ids=torch.tensor([prompt + block]), output_hidden_states=True).hidden_states
    expect = torch.cat([hs[1], hs[2], hs[3]], -1)[0, 6:]
    assert aux is not None and torch.allclose(aux[0], expect, atol=1e-4)


def test_other_architectures_are_refused_by_name() -> None:
    with pytest.raises(UnsupportedTarget, match="gemma3_text"):
        StaticLlama(make_gemma(60), slots=1, max_len=8)


def test_cacheless_states_equal_transformers_on_right_padded_rows() -> None:
    """What training reads from the target: aux features and logits, the same as transformers with a mask."""
    model = make_llama(60, layers=4)
    runner = StaticLlama(model, slots=0, max_len=0)
    rows = [[1, 5, 9, 11, 7, 3], [1, 4, 2]]
    ids = torch.tensor([r + [0] * (6 - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (6 - len(r)) for r in rows])
    logits, aux = runner.states(ids, (1, 2, 3))
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    expect = torch.cat([out.hidden_states[i] for i in (1, 2, 3)], -1)
    for row, r in enumerate(rows):
        n = len(r)
        assert torch.allclose(logits[row, :n], out.logits[row, :n], atol=1e-4)
        assert torch.allclose(aux[row, :n], expect[row, :n], atol=1e-4)


def test_prefiltered_nucleus_is_the_full_sorts_exactly_and_rows_past_it_fall_back() -> None:
    from inference.decoding.continuous import full_nucleus, nucleus, sample

    torch.manual_seed(0)
    vocab = 500
    peaked = torch.randn(3, vocab) * 6  # most mass in few tokens: the prefilter holds the nucleus
    flat = torch.randn(2, vocab) * 0.1  # nearly uniform: it does not
    scaled = torch.cat([peaked, flat]) / 0.7
    top_p = torch.full((5,), 0.95)
    probs, ids, done = nucleus(scaled, top_p, prefilter=64)
    assert done.tolist() == [True, True, True, False, False]
    full_probs, full_ids = full_nucleus(scaled, top_p)
    for row in range(3):  # the same kept set and the same renormalised probabilities
        dense = torch.zeros(vocab).scatter(0, ids[row], probs[row])
        dense_full = torch.zeros(vocab).scatter(0, full_ids[row], full_probs[row])
        assert torch.allclose(dense / dense.sum(), dense_full / dense_full.sum(), atol=1e-6)
    # Sampling draws only from each row's nucleus, flat rows included (through the fallback).
    temperature = torch.full((5,), 0.7)
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        token = sample(torch.cat([peaked, flat]), temperature, top_p, gen)
        for row in range(5):
            kept = full_ids[row][full_probs[row] > 0]
            assert int(token[row]) in set(kept.tolist())
    greedy = sample(torch.cat([peaked, flat]), torch.zeros(5), top_p, gen)
    assert greedy.tolist() == torch.cat([peaked, flat]).argmax(-1).tolist()


def test_no_attention_of_a_forward_or_a_timed_decode_runs_on_cudnn(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuDNN's fused attention builds a plan per new shape (67 ms for a prefill on an H200): every attention call
    of the runner (prefill, decode, verify) and of a timed decode sees it switched off, and it is back after."""
    import torch.nn.functional as F

    from inference.decoding.draft_model import DraftConfig, Eagle3Draft
    from inference.decoding.hidden_states import default_aux_layers
    from training.accept import evaluate

    seen: list[bool] = []
    real = F.scaled_dot_product_attention

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model = make_llama(60, layers=3)
    runner = StaticLlama(model, slots=1, max_len=16)
    runner.forward(torch.tensor([[1, 5, 9]]), torch.arange(3)[None], slots=torch.tensor([0]), prefill=True)
    runner.forward(torch.tensor([[4]]), torch.tensor([[3]]))
    cfg = model.config
    draft = Eagle3Draft(DraftConfig(hidden_size=cfg.hidden_size, intermediate_size=64, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=60, draft_vocab_size=60,
                                    target_hidden_size=cfg.hidden_size)).eval()
    draft.set_vocab(torch.zeros(60, dtype=torch.long), torch.ones(60, dtype=torch.bool))
    evaluate(model, draft, default_aux_layers(3), [[1, 5, 9, 2]], max_new=6, k=2, use_graph=False)
    assert len(seen) > 10 and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled()


def _sdpa_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor
                    ) -> torch.Tensor:
    """The runner's default decode attention on queries [S, T, heads, d]: grouped rows under the position mask."""
    import torch.nn.functional as F

    s, t, heads, d = q.shape
    kvh, max_len = k_cache.shape[1], k_cache.shape[2]
    g = heads // kvh
    qg = q.reshape(s, t, kvh, g, d).permute(0, 2, 3, 1, 4).reshape(s, kvh, g * t, d)
    query_pos = positions[:, None, :].expand(s, g, t).reshape(s, 1, g * t, 1)
    mask = torch.arange(max_len, device=q.device).view(1, 1, 1, -1) <= query_pos
    out = F.scaled_dot_product_attention(qg, k_cache[:s], v_cache[:s], attn_mask=mask)
    return out.view(s, kvh, g, t, d).permute(0, 3, 1, 2, 4).reshape(s, t, heads, d)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("width", [1, 6])
def test_triton_decode_kernel_equals_sdpa_on_cuda(dtype: torch.dtype, width: int) -> None:
    """SmolLM2's attention shape (9 heads on 3 kv heads of 64), 256 slots of 832 positions, compiled kernel."""
    from inference.decoding.decode_kernel import split_kv_attention

    gen = torch.Generator(device="cuda").manual_seed(width)
    slots, max_len = 256, 832
    k_cache = torch.randn(slots, 3, max_len, 64, device="cuda", dtype=dtype, generator=gen)
    v_cache = torch.randn(slots, 3, max_len, 64, device="cuda", dtype=dtype, generator=gen)
    q = torch.randn(slots, width, 9, 64, device="cuda", dtype=dtype, generator=gen)
    start = torch.randint(0, max_len - width + 1, (slots,), device="cuda", generator=gen)
    start[0], start[-1] = 0, max_len - width
    positions = start[:, None] + torch.arange(width, device="cuda")
    with without_cudnn():
        expect = _sdpa_reference(q, k_cache, v_cache, positions)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(split_kv_attention(q, k_cache, v_cache, positions).float(), expect.float(),
                               atol=tol, rtol=tol)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("width", [1, 4])
def test_triton_decode_graph_replays_with_new_positions_as_sdpa_computes(width: int) -> None:
    """One captured step replayed at positions drawn afresh each time (0 and max_len - width among them): the
    kernel's grid is fixed by the cache's shape, so the graph's logits equal the eager sdpa runner's."""
    model = make_llama(60, layers=3).cuda()
    slots, max_len = 8, 300
    runners = {name: StaticLlama(model, slots=slots, max_len=max_len, decode_attention=name)
               for name in ("sdpa", "triton")}
    prompt = torch.randint(3, 60, (slots, 40), device="cuda")
    for runner in runners.values():
        runner.forward(prompt, torch.arange(40, device="cuda").expand(slots, -1),
                       slots=torch.arange(slots, device="cuda"), prefill=True)
    graph = DecodeGraph(runners["triton"], use_graph=True, width=width)
    assert graph.graph is not None
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(4):
        tokens = torch.randint(3, 60, (slots, width), device="cuda", generator=gen)
        start = torch.randint(0, max_len - width + 1, (slots,), device="cuda", generator=gen)
        start[0], start[-1] = 0, max_len - width
        positions = start[:, None] + torch.arange(width, device="cuda")
        got = graph.run(tokens, positions)[0].clone()
        expect, _ = runners["sdpa"].forward(tokens, positions, last_only=width == 1)
        torch.testing.assert_close(got, expect, atol=1e-3, rtol=1e-3)
