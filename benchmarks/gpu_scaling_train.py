"""The `bench-train` stage of benchmarks/gpu_scaling.py and the training settings every curve point shares
(`train_config`, `train_stats`), with the device the replays run on.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpu_scaling_data import Results, load_jsonl, save_jsonl


def torch_device() -> Any:
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train_config(args: argparse.Namespace, data: Path, field: str, out: Path, **extra: Any) -> Any:
    from training.config import make_config

    values = {"data": str(data), "target": str(Path(args.work) / "target"), "out": str(out),
              "messages_field": field, "max_length": args.max_length, "batch_tokens": args.batch_tokens,
              "epochs": args.epochs, "lr": args.lr, "draft_vocab_size": args.draft_vocab, "log_every": 25,
              # Checkpoints every 200 steps, and at the step a time limit's TERM stops it: the next call resumes.
              "save_every": 200, "resume": True, "seed": 0, "attention_kernels": args.attention_kernels, **extra}
    return make_config({k: v for k, v in values.items() if v is not None})


def train_stats(result: Any) -> dict[str, Any]:
    """The product curve's training stats of a point, and this GPU's peak memory."""
    from training.curve.runner import training_stats
    from training.progress import peak_memory_gib

    return {**training_stats(result), "peak_memory_gib": peak_memory_gib()}


def mfu(tokens_per_s: float, target_params: float, draft_flops_per_token: float) -> float:
    """Model FLOPs utilisation against the H200's ~790 TFLOP/s bf16 measured on this kind of machine."""
    flops = tokens_per_s * (2 * target_params + draft_flops_per_token)
    return flops / 790e12


def bench_train(args: argparse.Namespace) -> None:
    import torch

    from training.trainer import train

    results = Results(args)
    work = Path(args.work)
    data = work / "bench_train.jsonl"
    regen = load_jsonl(work / "regen" / "regenerated.jsonl")[: args.bench_train_rows]
    save_jsonl(data, [{"id": r["id"], "conversations": r["conversations"]} for r in regen])
    bench = results.data.setdefault("bench_train", {})
    for name, extra in (("rows_batch8", {"batch_tokens": None, "batch_size": 8}),
                        ("tokens_16k", {"batch_tokens": 16384}), ("tokens_32k", {"batch_tokens": 32768})):
        if name in bench:
            continue
        cfg = train_config(args, data, "conversations", work / f"bench_train_{name}",
                           **{"max_steps": args.bench_train_steps, "epochs": 50, **extra})
        if extra.get("batch_tokens") is None:
            cfg = cfg.model_copy(update={"batch_tokens": None})
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        result = train(cfg)
        stats = train_stats(result)
        stats["step_s"] = round(result.wall_s / max(1, result.steps), 4)
        # Draft FLOPs per token: 7 TTT steps x (fwd + bwd = 3x) x 2 x (layer + lm_head) parameters.
        draft_params = 576 * 1728 + 4 * 576 * 1152 + 3 * 576 * 1536 + 576 * args.draft_vocab
        stats["mfu"] = round(mfu(result.tokens_per_s, 134.5e6, 7 * 3 * 2 * draft_params), 4)
        bench[name] = stats
        results.save()
        print(name, json.dumps(stats))
    base = bench["rows_batch8"]["train_tokens_per_s"]
    bench["speedup_vs_rows_batch8"] = {k: round(v["train_tokens_per_s"] / base, 2) for k, v in bench.items()
                                       if isinstance(v, dict) and "train_tokens_per_s" in v}
    results.save()
    print(json.dumps(bench["speedup_vs_rows_batch8"]))
