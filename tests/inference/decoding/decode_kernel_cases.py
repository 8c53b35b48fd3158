"""What the split-KV kernel's tests compare, computed in a child process under Triton's interpreter.

`triton.jit` compiles or interprets when a function is decorated, Triton's own `tl.max` and `tl.sum`
included, and an interpreted kernel cannot call compiled ones. The test process imports Triton early and
compiled (importing transformers' Llama does), and Triton's extension cannot be imported a second time, so
`test_decode_kernel.py` runs this file once with TRITON_INTERPRET=1 set from the start; it saves every case's
kernel output beside its reference (`python decode_kernel_cases.py OUT.pt`) and the tests assert on them.
Shapes are tiny: the interpreter runs each program in NumPy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "training"))
from tiny_models import make_llama  # noqa: E402

from inference.decoding.decode_kernel import split_kv_attention  # noqa: E402
from inference.decoding.static_llama import StaticLlama  # noqa: E402

# (slots, kv_heads, g, t, max_len): one slot, several, GQA g = 3 and g = 1, decode (t = 1) and verify (t = 6).
SHAPES = [(1, 3, 3, 1, 40), (4, 3, 3, 1, 150), (3, 2, 1, 6, 70), (5, 1, 3, 6, 130)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SPLIT = 64  # several splits per slot at these lengths, so the merge and the early exit both take part


def matmul_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor
                     ) -> torch.Tensor:
    """StaticLlama's matmul path, written out: grouped rows [S, kvh, g*T, d] over every position under the
    mask key <= query position, back in [S, T, heads, d]."""
    s, t, heads, d = q.shape
    kvh, max_len = k_cache.shape[1], k_cache.shape[2]
    g = heads // kvh
    qg = q.reshape(s, t, kvh, g, d).permute(0, 2, 3, 1, 4).reshape(s, kvh, g * t, d)
    query_pos = positions[:, None, :].expand(s, g, t).reshape(s, 1, g * t, 1)
    mask = torch.arange(max_len).view(1, 1, 1, -1) <= query_pos
    scores = (qg @ k_cache[:s].transpose(-1, -2)).float() * d**-0.5
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1).to(v_cache.dtype)
    out = weights @ v_cache[:s]
    return out.view(s, kvh, g, t, d).permute(0, 3, 1, 2, 4).reshape(s, t, heads, d)


def random_case(slots: int, kv_heads: int, g: int, t: int, max_len: int, dtype: torch.dtype, seed: int
                ) -> tuple[torch.Tensor, ...]:
    """Queries, a cache with one spare slot past the queried ones, and positions: slot 0 at the start, the last
    slot ending at max_len - 1, the others anywhere, each slot's t tokens consecutive."""
    gen = torch.Generator().manual_seed(seed)
    k_cache = torch.randn(slots + 1, kv_heads, max_len, 64, generator=gen).to(dtype)
    v_cache = torch.randn(slots + 1, kv_heads, max_len, 64, generator=gen).to(dtype)
    q = torch.randn(slots, t, kv_heads * g, 64, generator=gen).to(dtype)
    start = torch.randint(0, max_len - t + 1, (slots,), generator=gen)
    start[0], start[-1] = 0, max_len - t
    return q, k_cache, v_cache, start[:, None] + torch.arange(t)


def equal_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(kernel, matmul reference) for every shape and dtype."""
    out = {}
    for name, dtype in DTYPES.items():
        for shape in SHAPES:
            q, k_cache, v_cache, positions = random_case(*shape, dtype, seed=shape[0] * 10 + shape[3])
            out[f"{name}-{shape}"] = (split_kv_attention(q, k_cache, v_cache, positions, split_len=SPLIT),
                                      matmul_attention(q, k_cache, v_cache, positions))
    return out


def stale_case() -> tuple[torch.Tensor, torch.Tensor]:
    """(before, after) overwriting every cache entry past each slot's last position (and the spare slot)."""
    q, k_cache, v_cache, positions = random_case(3, 3, 3, 6, 100, torch.float32, seed=7)
    before = split_kv_attention(q, k_cache, v_cache, positions, split_len=SPLIT)
    stale = torch.arange(100).view(1, 1, -1, 1) > positions[:, -1].view(-1, 1, 1, 1)
    k_cache[:3].masked_fill_(stale, 1e4)
    v_cache[:3].masked_fill_(stale, float("nan"))
    k_cache[3], v_cache[3] = float("nan"), float("nan")
    return before, split_kv_attention(q, k_cache, v_cache, positions, split_len=SPLIT)


def nan_buffer_case() -> tuple[torch.Tensor, torch.Tensor]:
    """(kernel, reference) with every buffer the kernel allocates filled with nan first: what a replayed graph's
    split buffers hold past a slot's position is an earlier step's numbers."""
    q, k_cache, v_cache, positions = random_case(3, 3, 3, 1, 200, torch.float32, seed=3)
    real_empty = torch.empty
    torch.empty = lambda *a, **k: real_empty(*a, **k).fill_(float("nan"))  # type: ignore[assignment]
    try:
        out = split_kv_attention(q, k_cache, v_cache, positions, split_len=SPLIT)
    finally:
        torch.empty = real_empty
    return out, matmul_attention(q, k_cache, v_cache, positions)


def causal_case() -> tuple[torch.Tensor, torch.Tensor]:
    """(before, after) changing the key and value of each slot's verify token 3 (index j + 1 with j = 2)."""
    q, k_cache, v_cache, positions = random_case(2, 3, 3, 6, 60, torch.float32, seed=11)
    before = split_kv_attention(q, k_cache, v_cache, positions, split_len=SPLIT)
    for s in range(2):
        k_cache[s, :, positions[s, 3]] += 3.0
        v_cache[s, :, positions[s, 3]] -= 5.0
    return before, split_kv_attention(q, k_cache, v_cache, positions, split_len=SPLIT)


def llama_case(width: int) -> dict[str, torch.Tensor]:
    """Logits and aux features of one decode (width 1) or verify (width 4) step of a tiny random Llama after
    prefills of unequal lengths, with decode_attention "triton" and "matmul"."""
    torch.manual_seed(0)
    model = make_llama(60, layers=2)
    prompts = [[1, 5, 9, 11, 7], [1, 4], [1, 8, 8, 3, 2, 6, 9, 1, 4]]
    longest = max(map(len, prompts))
    tokens = torch.tensor([p + [0] * (longest - len(p)) for p in prompts])
    step = torch.randint(0, 60, (3, width), generator=torch.Generator().manual_seed(width))
    pos = torch.tensor([[len(p)] for p in prompts]) + torch.arange(width)
    out = {}
    for name in ("matmul", "triton"):
        runner = StaticLlama(model, slots=3, max_len=24, decode_attention=name)
        runner.forward(tokens, torch.arange(longest).expand(3, -1), slots=torch.tensor([0, 1, 2]), prefill=True)
        logits, aux = runner.forward(step, pos, aux_ids=(1,))
        assert aux is not None
        out[f"{name}_logits"], out[f"{name}_aux"] = logits, aux
    return out


def run_all() -> dict[str, object]:
    """Every case's tensors, by name."""
    return {"equal": equal_cases(), "stale": stale_case(), "nan_buffers": nan_buffer_case(),
            "causal": causal_case(), "llama_1": llama_case(1), "llama_4": llama_case(4)}


if __name__ == "__main__":
    torch.save(run_all(), sys.argv[1])
