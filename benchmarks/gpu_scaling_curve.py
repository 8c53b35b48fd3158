"""The `curve` stage of benchmarks/gpu_scaling.py: overfit gate, drafts per data scale, replay, timed decoding.

For each scale (regenerated answers, then the datasets' own answers as the control) one draft is trained with
datahunt's trainer and its greedy acceptance measured per eval set by replay (exact and batched); every point
is saved before the next starts. Then, for the top scale, the KV-cached speculative decoder is timed against the
target's own decoding (speedup) and sampled acceptance measured. Resumable: finished points are skipped.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path
from typing import Any

from gpu_scaling_data import Results, eval_items, load_jsonl, save_jsonl
from gpu_scaling_distinct import DISTINCT_SOURCES, distinct_source
from gpu_scaling_train import torch_device, train_config, train_stats

from training.curve.evaluate import score
from training.curve.plan import (
    CurveData,
    PlannedPoint,
    answer_order,
    distinct_prompts,
    point_rows,
    write_point_data,
)
from training.curve.report import run_row


def curve(args: argparse.Namespace) -> None:
    results = Results(args)
    started = time.perf_counter()
    work = Path(args.work)
    if args.source in DISTINCT_SOURCES:  # new prompts against more answers: their own order
        ordered, regen, answer_ids = distinct_source(args, work)
    else:
        prompts, regen = curve_source(args, work)
        ordered = [p for p in prompts if p["id"] in regen]
        # Regenerated rows in curve order (the product's): every prompt's first answer, then every second one, ...
        answer_ids = answer_order([p["id"] for p in ordered], set(regen))
    if "overfit" not in results.data and not args.overfit_last:
        results.data["overfit"] = overfit_gate(args, work)
        results.save()
        print("overfit", json.dumps(results.data["overfit"]))
    # The lm_head start, chosen once on training loss alone (the eval sets play no part): the first regenerated
    # scale trained from both starts, the lower final loss kept for every other point.
    first = min(args.scales)
    head = args.head_init
    if head == "auto" and args.source != "mirror":
        head = (results.data.get("head_init") or {}).get("chosen") or "random"  # the mirror curve's choice
    if head == "auto":
        for start in ("random", "target"):
            if not _has(results, first, True, start):
                results.data["runs"] += train_and_eval(args, work, first, True, answer_ids[:first], regen, start)
                results.save()
        loss = {start: next(r["final_loss"] for r in results.data["runs"] if r["samples"] == first
                            and r["regenerated"] and r.get("head_init") == start) for start in ("random", "target")}
        head = min(loss, key=lambda k: loss[k])
        results.data["head_init"] = {"chosen": head, "rule": f"lower final training loss at {first} samples",
                                     "final_loss": loss}
        results.save()
        print("head_init", json.dumps(results.data["head_init"]))
    # Each scale's regenerated point, then its control, smallest first (a call cut short leaves whole pairs);
    # the top scale's timing right after its regenerated point; sampling last.
    # Target-written prompts have no original answers: another source has no control points.
    controls = args.control_scales if args.source == "mirror" else []
    plan: list[tuple[str, Any]] = []
    for samples in sorted(set(args.scales) | set(controls)):
        if samples in args.scales:
            plan.append(("point", (samples, True, head)))
            if samples == max(args.scales) and not args.points_only:
                plan.append(("timed", (samples, True)))
        if samples in controls:
            plan.append(("point", (samples, False, head)))
    if args.time_control and controls and not args.points_only:
        plan.append(("timed", (max(controls), False)))
    if not args.points_only:
        plan.append(("sampled", (max(args.scales), True)))
    plan.append(("overfit", None))
    for kind, spec in plan:
        left = args.budget_s - (time.perf_counter() - started)
        if kind == "overfit":
            if "overfit" not in results.data and left > 90:
                results.data["overfit"] = overfit_gate(args, work)
                print("overfit", json.dumps(results.data["overfit"]))
        elif kind == "point":
            samples, regenerated, _ = spec
            if _has(results, samples, regenerated, head, args.source):
                continue
            need = estimate_train_s(args, results, samples, regenerated)
            if need > left and not (args.split_points and left > 120):
                results.data["stopped"] = (f"{left:.0f}s left, {need:.0f}s needed for {samples} "
                                           f"regenerated={regenerated} head={head}")
                results.save()
                print(results.data["stopped"])
                return
            if regenerated and samples > len(answer_ids) or not regenerated and samples > len(ordered):
                print(f"skipping {samples} regenerated={regenerated}: only {len(answer_ids)} answers, "
                      f"{len(ordered)} prompts")
                continue
            rows = answer_ids[:samples] if regenerated else ordered[:samples]
            results.data["runs"] += train_and_eval(args, work, samples, regenerated, rows, regen, head)
        else:
            samples, regenerated = spec
            runs = [r for r in results.data["runs"] if r["samples"] == samples and r["regenerated"] is regenerated
                    and r.get("head_init") == head and _source_of(r) == SOURCES[args.source]]
            for run in runs:
                if kind == "timed" and all(str(k) in run.get("timed_by_k", {}) for k in args.timed_ks) \
                        or kind == "sampled" and "accept_length_sampled" in run:
                    continue
                if time.perf_counter() - started > args.budget_s - 30:
                    results.data["stopped"] = f"budget reached before {kind} {samples} {run['eval_set']}"
                    results.save()
                    return
                name = run_name(samples, regenerated, head, args.source)
                prompts_of_set = [e["prompt"] for e in eval_items(args) if e["set"] == run["eval_set"]]
                export = work / "runs" / name / "export"
                if kind == "timed":
                    record_timing(run, timed_decode(args, export, prompts_of_set[: args.timed_prompts]), args.k)
                else:
                    run.update(sampled_accept(args, export, prompts_of_set[: args.sampled_prompts]))
                results.save()
                print(json.dumps({k: run.get(k) for k in ("samples", "regenerated", "eval_set", "speedup",
                                                           "decoded_accept_length", "accept_length_sampled")}))
        results.save()
    results.data.pop("stopped", None)
    results.save()
    for r in results.data["runs"]:
        print(r["samples"], r["regenerated"], r["eval_set"], r["accept_length"], r.get("speedup"))


def overfit_gate(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Train to convergence on the greedy answers of N prompts; replay acceptance on those same prompts."""
    from training.trainer import train

    rows = load_jsonl(work / "regen_greedy" / "regenerated.jsonl")
    data = work / "overfit.jsonl"
    save_jsonl(data, [{"id": r["id"], "conversations": r["conversations"]} for r in rows])
    cfg = train_config(args, data, "conversations", work / "runs" / "overfit", epochs=args.overfit_epochs,
                       lr=args.overfit_lr)
    result = train(cfg)
    pairs = [(_user_prompt(r), [t for t in r["conversations"] if t["role"] == "assistant"][0]["content"])
             for r in rows]
    measured = _score(replay_on(args, result.export_dir, pairs, k=args.k), len(pairs))
    return {"samples": len(rows), "epochs": args.overfit_epochs, "lr": args.overfit_lr, "head_init": cfg.head_init,
            **train_stats(result), "accept_length": measured.accept_length,
            "per_position_accept": measured.per_position_accept}


def _score(counts: Any, prompts: int) -> Any:
    """Replay's pooled round counts as the product curve scores a set."""
    return score(counts.tokens, counts.rounds, counts.attempted, counts.accepted, prompts)


def _user_prompt(row: dict[str, Any]) -> str:
    return next(t["content"] for t in row["conversations"] if t["role"] == "user")


_TARGET: dict[str, Any] = {}


def _target(args: argparse.Namespace) -> tuple[Any, Any]:
    """The bf16 target and its tokenizer, loaded once per process."""

    from training.trainer import load_target

    if "model" not in _TARGET:
        _TARGET["model"], _TARGET["tokenizer"] = load_target(Path(args.work) / "target", torch_device())
    return _TARGET["model"], _TARGET["tokenizer"]


def replay_on(args: argparse.Namespace, export_dir: Path, pairs: list[tuple[str, str]], k: int) -> Any:
    """Greedy chain-k replay over (prompt, target greedy answer) pairs, tokenized with the chat template."""
    from inference.decoding.hidden_states import target_embeddings
    from training.export import load_draft
    from training.replay import replay_counts

    target, tokenizer = _target(args)
    draft, layers = load_draft(export_dir, target_embeddings(target).cpu(),
                               target_layers=target.config.num_hidden_layers)
    draft = draft.to(device=target.device, dtype=target.dtype).eval()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts, outputs = [], []
    for prompt, answer in pairs:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=True,
                                            add_generation_prompt=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
        outputs.append(tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos])
    return replay_counts(target, draft, layers, prompts, outputs, k=k, batch=16)


SOURCES = {"mirror": "mirror", "written": "target-written", "mixed": "mirror+target-written", **DISTINCT_SOURCES}


def curve_source(args: argparse.Namespace, work: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The prompts and regenerated rows of `--source`: the mirror's (the published curve), the target-written
    ones `write-prompts` vetted and answered, or both (mirror prompts first: every prompt's first answer still
    comes before any second one)."""
    prompts: list[dict[str, Any]] = []
    regen: dict[str, dict[str, Any]] = {}
    if args.source in {"mirror", "mixed"}:
        prompts += load_jsonl(work / "prompts.jsonl")
        regen.update({r["id"]: r for r in load_jsonl(work / "regen" / "regenerated.jsonl")})
    if args.source in {"written", "mixed"}:
        answers = work / "written_regen" / "regenerated.jsonl"
        if not answers.exists():
            raise SystemExit(f"--source {args.source}: no target-written answers in {answers}; run write-prompts")
        prompts += load_jsonl(work / "written_rows.jsonl")
        regen.update({r["id"]: r for r in load_jsonl(answers)})
    return prompts, regen


def _source_of(run: dict[str, Any]) -> str:
    return str(run.get("source", "mirror"))


def _has(results: Any, samples: int, regenerated: bool, head: str, source: str = "mirror") -> bool:
    return any(r["samples"] == samples and r["regenerated"] is regenerated and r.get("head_init") == head
               and _source_of(r) == SOURCES[source] for r in results.data["runs"])


def run_name(samples: int, regenerated: bool, head: str, source: str = "mirror") -> str:
    kind = "regen" if regenerated else "orig"
    return f"{kind}_{samples}_{head}head" if source == "mirror" else f"{kind}_{source}_{samples}_{head}head"


def estimate_train_s(args: argparse.Namespace, results: Any, samples: int, regenerated: bool) -> float:
    """Seconds a point will take: its tokens (epochs x samples x the mean row length of the runs so far, else
    300 regenerated / 150 original) at the throughput of the longest run so far (else 40k tok/s), plus replay."""
    seen = [r for r in results.data["runs"] if r["regenerated"] is regenerated and r.get("train_tokens")]
    per_row = (sum(r["train_tokens"] / (r["samples"] * args.epochs) for r in seen) / len(seen)) if seen else \
        (300.0 if regenerated else 150.0)
    largest = max((r for r in results.data["runs"] if r.get("train_tokens_per_s")), default=None,
                  key=lambda r: r["train_tokens"])  # the longest run's speed: start-up weighs least there
    speed = largest["train_tokens_per_s"] if largest else 40_000.0
    return args.epochs * samples * per_row / speed + 25.0


@functools.cache
def rows_memo() -> Any:
    """The renderings this process's points share (they train on nested subsets of one pool)."""
    from training.tokenized import RenderedRows

    return RenderedRows()


def train_and_eval(args: argparse.Namespace, work: Path, samples: int, regenerated: bool,
                   rows: list[Any], regen: dict[str, dict[str, Any]], head: str) -> list[dict[str, Any]]:
    """Train one draft on `rows` (ids of regenerated answers, or prompt rows for the datasets' own answers),
    evaluate it per eval set by replay. The rows, their file and the run rows are the product curve's
    (`training.curve`); replay against the engine's greedy answers is this benchmark's evaluator."""
    from training.trainer import train

    name = run_name(samples, regenerated, head, args.source)
    point = PlannedPoint(name=name, samples=samples, control=not regenerated)
    prompts = [] if regenerated else [r["id"] for r in rows]
    data = CurveData(answers=list(rows) if regenerated else [], prompts=prompts,
                     rows={rid: regen[rid]["conversations"] for rid in rows} if regenerated else {},
                     originals={r["id"]: r["original_messages"] for r in rows} if not regenerated else {})
    picked = point_rows(point, data)
    file = write_point_data(picked, work / f"{name}.jsonl")
    result = train(train_config(args, file, "conversations", work / "runs" / name, head_init=head), memo=rows_memo())
    info = train_stats(result)
    evals = eval_items(args)
    greedy = {r["id"]: r for r in load_jsonl(work / "eval_greedy" / "regenerated.jsonl")}
    out = []
    for set_name in sorted({e["set"] for e in evals}):
        items = [e for e in evals if e["set"] == set_name and e["id"] in greedy]
        pairs = [(e["prompt"], [t for t in greedy[e["id"]]["conversations"] if t["role"] == "assistant"][0]["content"])
                 for e in items]
        measured = _score(replay_on(args, result.export_dir, pairs, k=args.k), len(pairs))
        run = run_row(samples, regenerated, set_name, measured, distinct_prompts(picked), info,
                      data_scale=round(samples / args.base, 3), method="greedy replay", head_init=head)
        if args.source != "mirror":  # the published curve's rows carry no source: they are the mirror's
            run["source"] = SOURCES[args.source]
        out.append(run)
        print(json.dumps({k: run[k] for k in ("samples", "regenerated", "eval_set", "accept_length")}))
    return out


def _loaded(args: argparse.Namespace, export_dir: Path, prompts: list[str]) -> tuple[Any, ...]:
    from inference.decoding.hidden_states import target_embeddings
    from training.export import load_draft

    target, tokenizer = _target(args)
    draft, layers = load_draft(export_dir, target_embeddings(target).cpu(),
                               target_layers=target.config.num_hidden_layers)
    draft = draft.to(device=target.device, dtype=target.dtype).eval()
    eos = {tokenizer.convert_tokens_to_ids("<|im_end|>")}
    ids = []
    for p in prompts:
        enc = tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True, add_generation_prompt=True)
        ids.append(list(enc["input_ids"] if hasattr(enc, "keys") else enc))
    return target, draft, layers, ids, eos


TIMING_KEYS = ("timed_prompts", "decoded_accept_length", "decoded_per_position_accept", "speculative_tok_s",
               "baseline_tok_s", "speedup", "identical_to_target_greedy")


def timed_decode(args: argparse.Namespace, export_dir: Path, prompts: list[str]) -> dict[str, dict[str, Any]]:
    """The KV-cached speculative decoder against the target's own decoding, batch 1, same prompts, for each
    chain length of --timed-ks (the baseline timed with the first and shared: it does not depend on k)."""
    from training.accept import evaluate

    target, draft, layers, ids, eos = _loaded(args, export_dir, prompts)
    out: dict[str, dict[str, Any]] = {}
    baseline_tok_s = 0.0
    for k in args.timed_ks:
        evaluate(target, draft, layers, ids[:2], max_new=32, k=k, eos=eos)  # warm-up: graphs, kernels
        report = evaluate(target, draft, layers, ids, max_new=args.eval_max_new, k=k, eos=eos,
                          baseline=not baseline_tok_s)
        baseline_tok_s = baseline_tok_s or report.baseline_tok_s
        spec = report.speculative_tok_s
        out[str(k)] = {"timed_prompts": len(ids), "decoded_accept_length": round(report.accept_length, 4),
                       "decoded_per_position_accept": [round(x, 4) for x in report.position_rates],
                       "speculative_tok_s": round(spec, 1), "baseline_tok_s": round(baseline_tok_s, 1),
                       "speedup": round(spec / baseline_tok_s, 3) if baseline_tok_s else None,
                       "identical_to_target_greedy": report.identical if report.baseline_s else None}
    return out


def record_timing(run: dict[str, Any], by_k: dict[str, dict[str, Any]], k: int) -> None:
    """Keep every chain length's timing under `timed_by_k`; the row's own fields (the published schema) take the
    eval chain length's. A timing from before (other kernels) is kept aside, not overwritten."""
    if "speedup" in run and "timed_by_k" not in run:
        run["timed_before"] = {key: run[key] for key in TIMING_KEYS if key in run}
    run.setdefault("timed_by_k", {}).update(by_k)
    if str(k) in by_k:
        run.update(by_k[str(k)])


def sampled_accept(args: argparse.Namespace, export_dir: Path, prompts: list[str]) -> dict[str, Any]:
    """Acceptance of speculative sampling at the regeneration temperature (exact rejection sampling)."""
    from training.accept import evaluate

    target, draft, layers, ids, eos = _loaded(args, export_dir, prompts)
    hot = evaluate(target, draft, layers, ids, max_new=args.eval_max_new, k=args.k, eos=eos,
                   temperature=args.temperature, seed=0, baseline=False)
    return {"accept_length_sampled": round(hot.accept_length, 4), "sampled_prompts": hot.prompts,
            "per_position_accept_sampled": [round(x, 4) for x in hot.position_rates],
            "sampling_temperature": args.temperature}
