"""Split-KV ("flash-decoding") attention for decode and verify steps: each slot reads only its live positions.

`StaticLlama`'s default decode attention (PyTorch's memory-efficient kernel under a mask) reads all `max_len`
cached positions of every slot, live or not: on an H200 a graph-replayed 1,024-slot x 832-position step takes
16 ms against a 4.6 ms floor for reading the cache once. This kernel reads, for slot s, only positions
0..max(positions[s]) (read on the device, so no host synchronisation and nothing the CUDA graph fixes):

1. `split_partials`, grid (slots, kv_heads, splits): the cache's positions are cut into fixed `split_len`
   chunks; program (s, h, c) attends the g*t query rows of kv head h (the g = heads / kv_heads query heads of
   each of the t new tokens) to chunk c's visible keys with an online softmax in fp32, and writes the chunk's
   normalised output and log-sum-exp. A chunk past the slot's last position exits at once, so a short slot costs
   one position load per chunk. The grid depends only on the cache's shape, never on the lengths: one launch
   is captured in a graph and replayed as positions grow.
2. `merge_splits`, grid (slots, kv_heads): each row's chunks merged by their log-sum-exp (the softmax over the
   union), written straight into [slots, t, heads, head_dim], the layout the output projection reads (no
   permute copy before or after: queries are read through their strides as the rotary pass leaves them).

Query j of a verify step sees positions <= positions[s, j] (the causal rule among the new tokens, the same
rule as the mask of the other two paths). Inputs may be bf16, fp16 or fp32; head_dim a power of two, 16 to 128.

Speed: unmeasured. No GPU has run it yet; `benchmarks/gpu_profile.py` times it beside `sdpa` and `matmul`.
Correctness is tested on CPU through Triton's interpreter (a child process with TRITON_INTERPRET=1 from its
start) and, on CUDA, against sdpa eagerly and inside a replayed CUDA graph.
"""

from __future__ import annotations

import importlib
import math
from types import ModuleType

import torch
from torch import Tensor

from inference.errors import InferenceError

# Positions per split: long enough that a split's fixed costs (its query load, its partial's write) stay small
# beside reading its keys, short enough that a 1,024-slot cache of ~800 positions still gives the GPU a few
# thousand programs. Key blocks: 64 positions per `tl.dot`. Neither is tuned yet.
SPLIT_LEN = 256
BLOCK_N = 64
HEAD_DIMS = (16, 32, 64, 128)


class DecodeKernelUnavailable(InferenceError, RuntimeError):
    """decode_attention="triton" cannot run here: Triton is not installed or the device is not CUDA."""


def load_kernels(device: torch.device) -> ModuleType:
    """The module holding the Triton programs, imported on first use; DecodeKernelUnavailable if it cannot run.

    Off CUDA it runs only when Triton interprets it (TRITON_INTERPRET=1 before Triton was first imported): the
    tests' way of running it on CPU.
    """
    try:
        importlib.import_module("triton")
    except ImportError as exc:
        raise DecodeKernelUnavailable("decode_attention='triton' needs the triton package (pip install triton)"
                                      ) from exc
    kernels = importlib.import_module("inference.decoding.decode_kernel_triton")
    interpreted = type(kernels.split_partials).__name__ == "InterpretedFunction"
    if device.type != "cuda" and not interpreted:
        raise DecodeKernelUnavailable(f"decode_attention='triton' needs a CUDA device, not {device.type!r}")
    return kernels


def split_kv_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor, *,
                       split_len: int = SPLIT_LEN) -> Tensor:
    """Attention output [S, T, heads, D] of queries q [S, T, heads, D] over the first S rows of the caches.

    k_cache, v_cache [slots >= S, kv_heads, L, D]; positions [S, T]: query (s, j) sees cached positions
    0..positions[s, j] of slot s (its own key and value already written there). Query head h*g + i reads kv
    head h (g = heads / kv_heads), as in Llama's grouped-query attention. Every last dimension must be
    contiguous (the rotary pass's query view is).
    """
    s, t, heads, d = q.shape
    kv_heads, max_len = k_cache.shape[1], k_cache.shape[2]
    if d not in HEAD_DIMS or heads % kv_heads or k_cache.shape[-1] != d or v_cache.shape != k_cache.shape:
        raise ValueError(f"split-KV attention needs head_dim in {HEAD_DIMS} and kv heads dividing query heads; "
                         f"got q {tuple(q.shape)}, cache {tuple(k_cache.shape)}")
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("split-KV attention reads rows of head_dim: their last dimension must be contiguous")
    kernels = load_kernels(q.device)
    g = heads // kv_heads
    rows = max(16, 1 << (g * t - 1).bit_length())  # tl.dot needs 16 rows or more (decode_kernel_triton)
    split_len = BLOCK_N * max(1, min(math.ceil(split_len / BLOCK_N), math.ceil(max_len / BLOCK_N)))
    splits = math.ceil(max_len / split_len)
    part = torch.empty(s, kv_heads, splits, rows, d, device=q.device, dtype=torch.float32)
    lse = torch.empty(s, kv_heads, splits, rows, device=q.device, dtype=torch.float32)
    out = torch.empty(s, t, heads, d, device=q.device, dtype=q.dtype)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"  # fp32 stays fp32; 16-bit inputs ignore it
    kernels.split_partials[(s, kv_heads, splits)](
        q, k_cache, v_cache, positions, part, lse,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), positions.stride(0), positions.stride(1),
        max_len, split_len, math.log2(math.e) / math.sqrt(d),
        T=t, G=g, D=d, BLOCK_R=rows, BLOCK_N=BLOCK_N, SPLITS=splits, PRECISION=precision)
    kernels.merge_splits[(s, kv_heads)](
        part, lse, positions, out, positions.stride(0), positions.stride(1),
        out.stride(0), out.stride(1), out.stride(2), split_len,
        T=t, G=g, D=d, BLOCK_R=rows, SPLITS=splits)
    return out
