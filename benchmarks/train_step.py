"""Draft training step throughput and memory for the two TTT attention implementations, side by side.

One training step = TTT unroll of k steps, weighted loss over the draft vocab, backward, AdamW step.
`diagonal` scores step 0's causal block and each later step's own-position key separately (manual matmuls,
fp32 scores); `masked_sdpa` concatenates every step's keys under a dense [T, (j+1)T] boolean mask and calls
PyTorch's fused scaled_dot_product_attention. Both compute the same loss (checked in the run); the draft
uses `diagonal` on CPU and `masked_sdpa` on CUDA (`ttt_attention(impl="auto")`), as measured here.

CPU (default): a fixed tiny config; tokens/s and peak RSS per variant, each variant in its own process.
CUDA (`--device cuda --hidden 4096 --seq 2048`): tokens/s, torch.cuda.max_memory_allocated and model FLOP
utilisation (MFU) against a peak (default 989e12, H100/H200 dense bf16). FLOPs per token, training = 3 x
forward, forward per TTT step = 2 x (matmul weights touched per token) + attention:
  fc (step 0 only): 2 * 3Ht * H; q/k/v: 2 * 2H * (Hq + 2 Hkv); o: 2 * Hq * H; MLP: 2 * 3 * H * I;
  lm_head: 2 * H * N; attention at step j: 4 * Hq * (T/2 + j) (scores and weighted sum, causal average).
Needs only torch and this repository. Writes benchmarks/results/train_step_<device>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # runs on a bare GPU image where the repo is not installed

import torch  # noqa: E402

from inference.decoding.draft_model import DraftConfig, Eagle3Draft  # noqa: E402
from training.loss import ttt_loss  # noqa: E402


def flops_per_token(cfg: DraftConfig, seq: int, steps: int) -> float:
    """Model FLOPs of one training token (3 x forward), as documented in the module docstring."""
    h, i, n, th = cfg.hidden_size, cfg.intermediate_size, cfg.draft_vocab_size, cfg.target_hidden_size
    hq = cfg.num_attention_heads * cfg.resolved_head_dim
    hkv = cfg.num_key_value_heads * cfg.resolved_head_dim
    per_step = 2 * 2 * h * (hq + 2 * hkv) + 2 * hq * h + 2 * 3 * h * i + 2 * h * n
    attention = sum(4 * hq * (seq / 2 + j) for j in range(steps))
    return 3.0 * (2 * 3 * th * h + steps * per_step + attention)


def make_batch(cfg: DraftConfig, batch: int, seq: int, device: str, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return {
        "ids": torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen).to(device),
        "aux": torch.randn(batch, seq, 3 * cfg.target_hidden_size, generator=gen).to(device),
        "target": (torch.randn(batch, seq, cfg.draft_vocab_size, generator=gen) * 2).to(device),
        "in_vocab": torch.ones(batch, seq, dtype=torch.bool).to(device),
        "mask": torch.ones(batch, seq, dtype=torch.long).to(device),
    }


def run_variant(
    variant: str, cfg: DraftConfig, batch: int, seq: int, steps: int, iters: int, device: str
) -> dict[str, Any]:
    """Time `iters` training steps of one variant after one warm-up step; return tokens/s, memory, loss."""
    torch.manual_seed(0)
    draft = Eagle3Draft(cfg).to(device)
    data = make_batch(cfg, batch, seq, device)
    optimizer = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=1e-4)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda"
                else torch.autocast("cpu", enabled=False))
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    losses = []
    elapsed = 0.0
    for it in range(iters + 1):
        if device == "cuda":
            torch.cuda.synchronize()
            if it == 1:
                torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        with autocast:
            logits = draft(data["ids"], data["aux"], steps, attention=variant)
        loss = ttt_loss(logits, data["target"], data["in_vocab"], data["mask"]).total
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 0.5)
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()
        if it > 0:
            elapsed += time.perf_counter() - start
        losses.append(float(loss.detach()))
    result = {"variant": variant, "tokens_per_s": batch * seq * iters / elapsed, "step_s": elapsed / iters,
              "first_loss": losses[0]}
    if device == "cuda":
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    else:
        rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result["peak_rss_gib"] = rss_peak / 2**20  # ru_maxrss is in KiB on Linux
        result["rss_growth_gib"] = (rss_peak - rss_start) / 2**20
    return result


def _child(args: tuple[Any, ...]) -> dict[str, Any]:
    torch.set_num_threads(args[-1])
    return run_variant(*args[:-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--hidden", type=int, default=None, help="Draft and target hidden size.")
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--ttt-steps", type=int, default=7)
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--peak-flops", type=float, default=989e12, help="Peak FLOP/s for MFU (bf16 dense).")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per variant.")
    args = parser.parse_args()
    if args.device == "cuda":
        hidden, seq, batch, iters = args.hidden or 4096, args.seq or 2048, args.batch or 1, args.iters or 10
        cfg = DraftConfig(hidden_size=hidden, intermediate_size=int(hidden * 3.5), num_attention_heads=hidden // 128,
                          num_key_value_heads=max(1, hidden // 512), vocab_size=128256, draft_vocab_size=32000,
                          target_hidden_size=hidden, max_position_embeddings=131072)
    else:
        hidden, seq, batch, iters = args.hidden or 256, args.seq or 256, args.batch or 2, args.iters or 5
        cfg = DraftConfig(hidden_size=hidden, intermediate_size=hidden * 2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=8192, draft_vocab_size=2048,
                          target_hidden_size=hidden)
    results = []
    for variant in ("diagonal", "masked_sdpa"):
        job = (variant, cfg, batch, seq, args.ttt_steps, iters, args.device, args.threads)
        if args.device == "cpu":
            with mp.get_context("spawn").Pool(1) as pool:  # own process: its own peak RSS
                results.append(pool.apply(_child, (job,)))
        else:
            results.append(run_variant(*job[:-1]))
            torch.cuda.empty_cache()
    flops = flops_per_token(cfg, seq, args.ttt_steps)
    for r in results:
        r["model_tflops_per_token"] = flops / 1e12
        if args.device == "cuda":
            r["mfu"] = r["tokens_per_s"] * flops / args.peak_flops
    diagonal, masked = results
    same_loss = math.isclose(diagonal["first_loss"], masked["first_loss"], rel_tol=2e-2)
    mem_key = "peak_memory_gib" if args.device == "cuda" else "rss_growth_gib"
    summary = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "config": cfg.to_dict(), "batch": batch, "seq": seq, "ttt_steps": args.ttt_steps,
        "iters": iters, "threads": args.threads if args.device == "cpu" else None, "peak_flops": args.peak_flops,
        "results": results, "same_loss": same_loss,
        "default_on_device": "masked_sdpa" if args.device == "cuda" else "diagonal",
        "diagonal_vs_masked_sdpa_speed": diagonal["tokens_per_s"] / masked["tokens_per_s"],
        "diagonal_vs_masked_sdpa_memory": diagonal[mem_key] / masked[mem_key] if masked[mem_key] else None,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"train_step_{args.device}"
    (RESULTS / f"{name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"# Draft training step ({args.device}: {summary['device']})", "",
             f"hidden {cfg.hidden_size}, intermediate {cfg.intermediate_size}, heads {cfg.num_attention_heads}/"
             f"{cfg.num_key_value_heads}, draft vocab {cfg.draft_vocab_size}, batch {batch} x seq {seq}, "
             f"{args.ttt_steps} TTT steps, {iters} timed steps after one warm-up; torch {torch.__version__}.", "",
             f"| variant | tokens/s | step s | {mem_key} | MFU |", "|---|---|---|---|---|"]
    for r in results:
        mfu = f"{100 * r['mfu']:.1f}%" if "mfu" in r else "n/a"
        lines.append(f"| {r['variant']} | {r['tokens_per_s']:.0f} | {r['step_s']:.3f} | {r[mem_key]:.3f} | {mfu} |")
    lines += ["", f"diagonal vs masked_sdpa: {summary['diagonal_vs_masked_sdpa_speed']:.2f}x tokens/s, memory ratio "
              f"{summary['diagonal_vs_masked_sdpa_memory']:.2f}; same loss on the same batch: {same_loss}. "
              f"Default here: {summary['default_on_device']}.",
              f"Model FLOPs per training token: {flops / 1e9:.2f} GFLOP (see the script's docstring)."]
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
