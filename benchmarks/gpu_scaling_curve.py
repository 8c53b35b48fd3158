"""The `curve` stage of benchmarks/gpu_scaling.py: overfit gate, drafts per data scale, replay, timed decoding.

For each scale (regenerated answers, then the datasets' own answers as the control) one draft is trained with
datahunt's trainer and its greedy acceptance measured per eval set by replay (exact and batched); every point
is saved before the next starts. Then, for the top scale, the KV-cached speculative decoder is timed against the
target's own decoding (speedup) and sampled acceptance measured. Resumable: finished points are skipped.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from gpu_scaling import Results, _device, _jsonl, _write_jsonl, eval_items, train_config, train_stats


def curve(args: argparse.Namespace) -> None:
    results = Results(args)
    started = time.perf_counter()
    work = Path(args.work)
    prompts = _jsonl(work / "prompts.jsonl")
    regen = {r["id"]: r for r in _jsonl(work / "regen" / "regenerated.jsonl")}
    ordered = [p for p in prompts if p["id"] in regen]
    if "overfit" not in results.data:
        results.data["overfit"] = overfit_gate(args, work)
        results.save()
        print("overfit", json.dumps(results.data["overfit"]))
    plan = [(s, True) for s in args.scales] + [(s, False) for s in args.control_scales]
    done = {(r["samples"], r["regenerated"]) for r in results.data["runs"]}
    for samples, regenerated in plan:
        if (samples, regenerated) in done:
            continue
        if time.perf_counter() - started > args.budget_s:
            results.data["stopped"] = f"budget {args.budget_s}s reached before {samples} regenerated={regenerated}"
            results.save()
            break
        rows = ordered[:samples]
        results.data["runs"] += train_and_eval(args, work, samples, regenerated, rows, regen)
        results.save()
    # Timing and sampled acceptance last: each replayed point is saved before the slow decoding starts.
    top = max(args.scales)
    for regenerated in (True, False):
        if time.perf_counter() - started > args.budget_s:
            break
        runs = [r for r in results.data["runs"] if r["samples"] == top and r["regenerated"] is regenerated]
        for run in runs:
            if "speedup" in run:
                continue
            name = f"{'regen' if regenerated else 'orig'}_{top}"
            prompts_of_set = [e["prompt"] for e in eval_items(args) if e["set"] == run["eval_set"]]
            run.update(timed_decode(args, work / "runs" / name / "export", prompts_of_set[: args.timed_prompts],
                                    sampled=regenerated))
            results.save()
            print(json.dumps({k: run.get(k) for k in ("samples", "regenerated", "eval_set", "speedup",
                                                       "decoded_accept_length", "accept_length_sampled")}))
    for r in results.data["runs"]:
        print(r["samples"], r["regenerated"], r["eval_set"], r["accept_length"], r.get("speedup"))


def overfit_gate(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Train to convergence on the greedy answers of N prompts; replay acceptance on those same prompts."""
    from training.trainer import train

    rows = _jsonl(work / "regen_greedy" / "regenerated.jsonl")
    data = work / "overfit.jsonl"
    _write_jsonl(data, [{"id": r["id"], "conversations": r["conversations"]} for r in rows])
    cfg = train_config(args, data, "conversations", work / "runs" / "overfit", epochs=args.overfit_epochs,
                       lr=args.overfit_lr)
    result = train(cfg)
    pairs = [(_user_prompt(r), [t for t in r["conversations"] if t["role"] == "assistant"][0]["content"])
             for r in rows]
    counts = replay_on(args, result.export_dir, pairs, k=args.k)
    return {"samples": len(rows), "epochs": args.overfit_epochs, "lr": args.overfit_lr, **train_stats(result),
            "accept_length": round(counts.tokens / max(1, counts.rounds), 4),
            "per_position_accept": [round(a / n, 4) if n else 0.0 for a, n in zip(counts.accepted, counts.attempted, strict=True)]}


def _user_prompt(row: dict[str, Any]) -> str:
    return next(t["content"] for t in row["conversations"] if t["role"] == "user")


_TARGET: dict[str, Any] = {}


def _target(args: argparse.Namespace) -> tuple[Any, Any]:
    """The bf16 target and its tokenizer, loaded once per process."""

    from training.trainer import load_target

    if "model" not in _TARGET:
        _TARGET["model"], _TARGET["tokenizer"] = load_target(Path(args.work) / "target", _device())
    return _TARGET["model"], _TARGET["tokenizer"]


def replay_on(args: argparse.Namespace, export_dir: Path, pairs: list[tuple[str, str]], k: int) -> Any:
    """Greedy chain-k replay over (prompt, target greedy answer) pairs, tokenized with the chat template."""
    from training.export import load_draft
    from training.hidden_states import target_embeddings
    from training.replay import replay_counts

    target, tokenizer = _target(args)
    draft, layers = load_draft(export_dir, target_embeddings(target).cpu())
    draft = draft.to(device=target.device, dtype=target.dtype).eval()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts, outputs = [], []
    for prompt, answer in pairs:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=True,
                                            add_generation_prompt=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
        outputs.append(tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos])
    return replay_counts(target, draft, layers, prompts, outputs, k=k, batch=16)


def train_and_eval(args: argparse.Namespace, work: Path, samples: int, regenerated: bool,
                   rows: list[dict[str, Any]], regen: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Train one draft on `rows` (regenerated answers, or the dataset's own), evaluate it per eval set."""
    from training.trainer import train

    name = f"{'regen' if regenerated else 'orig'}_{samples}"
    data = work / f"{name}.jsonl"
    if regenerated:
        _write_jsonl(data, [{"id": r["id"], "conversations": regen[r["id"]]["conversations"]} for r in rows])
    else:
        _write_jsonl(data, [{"id": r["id"], "conversations": r["original_messages"]} for r in rows])
    result = train(train_config(args, data, "conversations", work / "runs" / name))
    info = train_stats(result)
    evals = eval_items(args)
    greedy = {r["id"]: r for r in _jsonl(work / "eval_greedy" / "regenerated.jsonl")}
    out = []
    for set_name in sorted({e["set"] for e in evals}):
        items = [e for e in evals if e["set"] == set_name and e["id"] in greedy]
        pairs = [(e["prompt"], [t for t in greedy[e["id"]]["conversations"] if t["role"] == "assistant"][0]["content"])
                 for e in items]
        counts = replay_on(args, result.export_dir, pairs, k=args.k)
        run = {"data_scale": round(samples / args.base, 3), "samples": samples, "eval_set": set_name,
               "regenerated": regenerated, "prompts": len(pairs), "method": "greedy replay",
               "accept_length": round(counts.tokens / max(1, counts.rounds), 4),
               "per_position_accept": [round(a / n, 4) if n else 0.0 for a, n in zip(counts.accepted, counts.attempted, strict=True)],
               "rounds": counts.rounds, "tokens": counts.tokens, **info}
        out.append(run)
        print(json.dumps({k: run[k] for k in ("samples", "regenerated", "eval_set", "accept_length")}))
    return out


def timed_decode(args: argparse.Namespace, export_dir: Path, prompts: list[str], sampled: bool) -> dict[str, Any]:
    """The KV-cached speculative decoder against the target's own decoding, batch 1, same prompts."""
    from training.accept import evaluate
    from training.export import load_draft
    from training.hidden_states import target_embeddings

    target, tokenizer = _target(args)
    draft, layers = load_draft(export_dir, target_embeddings(target).cpu())
    draft = draft.to(device=target.device, dtype=target.dtype).eval()
    eos = {tokenizer.convert_tokens_to_ids("<|im_end|>")}
    ids = []
    for p in prompts:
        enc = tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True, add_generation_prompt=True)
        ids.append(list(enc["input_ids"] if hasattr(enc, "keys") else enc))
    evaluate(target, draft, layers, ids[:2], max_new=32, k=args.k, eos=eos)  # warm-up: graphs, kernels
    report = evaluate(target, draft, layers, ids, max_new=args.eval_max_new, k=args.k, eos=eos)
    out = {"timed_prompts": len(ids), "decoded_accept_length": round(report.accept_length, 4),
           "decoded_per_position_accept": [round(x, 4) for x in report.position_rates],
           "speculative_tok_s": round(report.speculative_tok_s, 1), "baseline_tok_s": round(report.baseline_tok_s, 1),
           "speedup": round(report.speedup, 3), "identical_to_target_greedy": report.identical}
    if sampled:
        hot = evaluate(target, draft, layers, ids[: args.sampled_prompts], max_new=args.eval_max_new, k=args.k,
                       eos=eos, temperature=args.temperature, seed=0)
        out.update(accept_length_sampled=round(hot.accept_length, 4), sampled_prompts=hot.prompts,
                   per_position_accept_sampled=[round(x, 4) for x in hot.position_rates],
                   sampling_temperature=args.temperature)
    return out


