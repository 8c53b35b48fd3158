"""Which fused attention a training step meets on this GPU, and what a new batch shape costs it the first time.

A length-packed epoch (training.trainer.token_batches) hands the trainer hundreds of distinct (rows, width)
shapes, each met once per epoch; the 16K curve run measured its first epoch at a fifth of the rate of the later
ones. This probe times the two attentions of a step on fresh shapes, first call against a repeat of the same
shape, under torch's own backend choice and with cuDNN's fused attention left out, side by side:

* `target`: the target's prefill, causal, no grad (inference.decoding.static_llama, `states`);
* `draft`: the draft's TTT attention, a [T, 2T] boolean mask, forward and backward (inference.decoding.draft_model).

Shapes differ between the arms (a plan cached by one arm must not serve the other). Prints one JSON document
and writes it to --out. GPU only; run from the repository root:

    python benchmarks/gpu_attention_probe.py --out benchmarks/results/gpu_attention_probe.json
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HEADS, HEAD_DIM = 9, 64  # SmolLM2-135M: 9 query heads of 64 (the draft repeats its 3 kv heads to 9)
BUDGET = 16_384  # tokens per batch, as the curve trains


def _arm(name: str) -> AbstractContextManager[Any]:
    if name == "auto":
        return nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _inputs(kind: str, rows: int, width: int) -> tuple[Any, ...]:
    dev, dtype = torch.device("cuda"), torch.bfloat16
    q = torch.randn(rows, HEADS, width, HEAD_DIM, device=dev, dtype=dtype, requires_grad=kind == "draft")
    if kind == "target":
        k, v = torch.randn_like(q), torch.randn_like(q)
        return q, k, v, None
    k = torch.randn(rows, HEADS, 2 * width, HEAD_DIM, device=dev, dtype=dtype, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    causal = torch.ones(width, width, dtype=torch.bool, device=dev).tril()
    mask = torch.cat([causal, torch.eye(width, dtype=torch.bool, device=dev)], dim=1)
    return q, k, v, mask


def _call(kind: str, q: Any, k: Any, v: Any, mask: Any) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    if kind == "target":
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _backend(kind: str, q: Any, k: Any, v: Any, mask: Any) -> str:
    choice = torch._fused_sdp_choice(q, k, v, attn_mask=mask, is_causal=kind == "target")  # type: ignore[attr-defined]
    return SDPBackend(choice).name


def probe(shapes: int) -> dict[str, Any]:
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                           "cudnn": torch.backends.cudnn.version(), "shapes_per_arm": shapes, "results": {}}
    widths = [192 + 37 * i for i in range(2 * shapes * 2)]  # distinct widths, none shared between arms
    for kind in ("target", "draft"):  # libraries loaded and kernels resident before the first timed call
        for arm in ("auto", "no-cudnn"):
            with _arm(arm):
                _call(kind, *_inputs(kind, 64, 160))
    for a, arm in enumerate(("auto", "no-cudnn")):
        for b, kind in enumerate(("target", "draft")):
            first, again, chosen = [], [], set()
            for width in widths[(a * 2 + b) * shapes : (a * 2 + b + 1) * shapes]:
                rows = max(1, BUDGET // width)
                args = _inputs(kind, rows, width)
                with _arm(arm):
                    chosen.add(_backend(kind, *args))
                    first.append(_call(kind, *args))
                    again.append(_call(kind, *args))
            out["results"][f"{arm}/{kind}"] = {
                "backend": sorted(chosen), "first_call_ms": round(1000 * sum(first) / len(first), 2),
                "repeat_ms": round(1000 * sum(again) / len(again), 2),
                "first_over_repeat": round(sum(first) / max(1e-9, sum(again)), 1)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=6, help="Fresh shapes per arm and attention.")
    parser.add_argument("--out", default="benchmarks/results/gpu_attention_probe.json")
    args = parser.parse_args()
    torch.ones(1, device="cuda")  # context up before any timing
    report = probe(args.shapes)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
