"""The `bench-regen` and `regen` stages of benchmarks/gpu_scaling.py, and `regen_run`, the one `regenerate()` run
through the local backend that every stage answering prompts (`write-prompts`, `regen-distinct`) shares.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from gpu_scaling_data import Results, eval_items, load_jsonl, mirror_prompts, save_jsonl


def environment() -> dict[str, Any]:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}


def sync_device() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def repetition(answers: list[str]) -> dict[str, float]:
    """Share of answers with a word 8-gram seen twice or more (a loop), and the mean distinct-4-gram ratio."""
    loops, distinct = 0, []
    for text in answers:
        words = text.split()
        grams8 = Counter(tuple(words[i : i + 8]) for i in range(len(words) - 7))
        loops += bool(grams8) and max(grams8.values()) >= 2
        grams4 = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
        if grams4:
            distinct.append(len(set(grams4)) / len(grams4))
    return {"answers": len(answers), "repeated_8gram_share": round(loops / max(1, len(answers)), 4),
            "distinct_4gram_ratio": round(sum(distinct) / max(1, len(distinct)), 4)}


def regen_run(args: argparse.Namespace, rows_file: Path, out_dir: Path, engine: str, slots: int,
              temperature: float, limit: int | None = None, samples: int = 1) -> dict[str, Any]:
    """One `regenerate()` run through the local backend; its throughput, finish reasons and repetition."""

    from inference.generation import Sampling
    from inference.local_backend import LocalTransformersBackend
    from inference.runner import RunConfig, regenerate

    backend = LocalTransformersBackend.load(Path(args.work) / "target", engine=engine, max_batch=slots,
                                            max_prompt_tokens=args.max_prompt_tokens + 16,
                                            decode_attention=args.decode_attention)
    sampling = Sampling(temperature=temperature, top_p=args.top_p if temperature > 0 else 1.0,
                        max_tokens=args.max_tokens, seed=0)
    config = RunConfig(input_path=rows_file, out_dir=out_dir, endpoints=[], concurrency=slots,
                       sampling=sampling, model="SmolLM2-135M-Instruct (GGUF Q4_1 dequantized, bf16)", limit=limit,
                       samples=samples)
    sync_device()
    start = time.perf_counter()
    summary = regenerate(config, backend)
    wall = time.perf_counter() - start
    rows = load_jsonl(out_dir / "regenerated.jsonl")
    reasons = Counter(r["meta"]["finish_reason"] for r in rows)
    answers = [t["content"] for r in rows for t in r["conversations"] if t["role"] == "assistant"]
    stats = getattr(backend, "stats", None)
    del backend
    sync_device()
    return {"engine": engine, "slots": slots, "decode_attention": args.decode_attention if engine == "static" else None,
            "rows": summary.total, "done": summary.done, "failed": summary.failed,
            "completion_tokens": summary.completion_tokens, "wall_s": round(wall, 2),
            "tokens_per_s": round(summary.completion_tokens / wall, 1), "sampling": sampling.model_dump(),
            "finish_reasons": {k: round(v / max(1, len(rows)), 4) for k, v in reasons.items()},
            "mean_completion_tokens": round(summary.completion_tokens / max(1, summary.done), 1),
            "repetition": repetition(answers),
            "engine_occupancy": round(stats.occupancy, 3) if stats else None}


# --- bench-regen, regen (GPU) --------------------------------------------------------------------------------
def bench_regen(args: argparse.Namespace) -> None:
    results = Results(args)
    results.data["env"] = environment()
    work = Path(args.work)
    prompts = mirror_prompts(args)
    bench = results.data.setdefault("bench_regen", {})
    # Engine runs with another decode attention than sdpa get their own entries, beside the sdpa ones.
    suffix = "" if args.decode_attention == "sdpa" else f"_{args.decode_attention}"
    for name, engine, slots in (("generate", "generate", args.bench_generate_batch),
                                ("engine" + suffix, "static", args.bench_generate_batch),
                                ("engine_refill" + suffix, "static", args.bench_slots)):
        if name not in bench:
            bench[name] = regen_run(args, prompts, work / f"bench_{name}", engine, slots, args.temperature,
                                    limit=args.bench_rows)
            results.save()
        print(name, json.dumps(bench[name]))
    base = bench["generate"]["tokens_per_s"]
    bench["speedup_vs_generate"] = {k: round(v["tokens_per_s"] / base, 2) for k, v in bench.items()
                                    if isinstance(v, dict) and "tokens_per_s" in v}
    results.save()
    print(json.dumps(bench["speedup_vs_generate"]))


def regen_all(args: argparse.Namespace) -> None:
    results = Results(args)
    work = Path(args.work)
    prompts = mirror_prompts(args)
    carried = work / "regen" / "regenerated.jsonl"
    if "regen" not in results.data and carried.exists() and not (work / "regen" / "run.json").exists():
        results.data["regen"] = {"carried": True, "rows": sum(1 for _ in carried.open(encoding="utf-8")),
                                 "note": "regenerated in an earlier session; see its scaling_raw.json"}
        results.save()
    if "regen" not in results.data:
        results.data["regen"] = regen_run(args, prompts, work / "regen", "static", args.slots, args.temperature,
                                          limit=args.rows)
        results.save()
    if args.answers > 1 and (results.data.get("regen_answers") or {}).get("answers") != args.answers:
        if carried_answers(carried, prompts, args.answers, args.rows) and not (work / "regen" / "run.json").exists():
            results.data["regen_answers"] = {"answers": args.answers, "carried": True,
                                             "note": "regenerated in an earlier session; see its scaling_raw.json"}
        else:
            # More answers to the same prompts (ids <id>#s<k>, seed 0 + k): the same run folder grows.
            results.data["regen_answers"] = {"answers": args.answers, **regen_run(
                args, prompts, work / "regen", "static", args.slots, args.temperature, limit=args.rows,
                samples=args.answers)}
            export_answers(carried, Path(args.out), args.answers)
        results.save()
    if "regen_greedy_overfit" not in results.data:
        results.data["regen_greedy_overfit"] = regen_run(args, prompts, work / "regen_greedy", "static",
                                                         min(256, args.overfit_rows), 0.0, limit=args.overfit_rows)
        results.save()
    if "eval_greedy" not in results.data:
        evals = eval_items(args)
        rows = [{"id": e["id"], "category": e["set"], "messages": [{"role": "user", "content": e["prompt"]}]}
                for e in evals]
        save_jsonl(work / "eval_rows.jsonl", rows)
        saved = args.max_tokens
        args.max_tokens = args.eval_max_new
        results.data["eval_greedy"] = regen_run(args, work / "eval_rows.jsonl", work / "eval_greedy", "static",
                                                min(512, len(rows)), 0.0)
        args.max_tokens = saved
        results.save()
    print(json.dumps({k: results.data[k] for k in ("regen", "regen_greedy_overfit", "eval_greedy")}, indent=1))


def carried_answers(regenerated: Path, prompts: Path, answers: int, limit: int | None) -> bool:
    """Whether `regenerated` already holds answers 2..`answers` (ids <id>#s<k>) of every prompt (the first
    `limit`): carried from an earlier session by `setup`, they need no regeneration."""
    if not regenerated.exists():
        return False
    ids = [r["id"] for r in load_jsonl(prompts)][:limit]
    have = {r["id"] for r in load_jsonl(regenerated)}
    return all(f"{i}#s{k}" in have for i in ids for k in range(1, answers))


def export_answers(regenerated: Path, out: Path, answers: int) -> None:
    """Answers 2..`answers` into out/regenerated_answers_s<k>.jsonl.xz, one file each (about 3.3 MB per answer of
    the 16K prompts, under the 16 MiB a returned file may have): tracked beside the first answers, a later
    session's `setup` carries them instead of regenerating them."""
    import lzma

    rows = load_jsonl(regenerated)
    for k in range(1, answers):
        mine = [r for r in rows if r["id"].endswith(f"#s{k}")]
        with lzma.open(out / f"regenerated_answers_s{k}.jsonl.xz", "wt", encoding="utf-8", preset=6) as fh:
            fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mine))
