"""Speculative decoding of a trained draft against its target, every mode on one GPU: greedy at B = 1, 8, 32,
sampled at T 0.7, a chain-length sweep, each with its round cost and break-even acceptance length.

    python benchmarks/gpu_speculative.py --target TARGET_DIR --draft DRAFT_DIR --prompts a.jsonl b.jsonl \\
        --out docs/results/speculative.json

Prompts are eval-accept's rows (conversations/messages, or {'text': ...}), taken in turn from each file.
Each run decodes `--prompts-per-run` prompts twice, with the target alone and speculatively, both timed:

* greedy, B = 1: `inference.decoding.spec_graph` (one CUDA graph a round) against its graph-replayed target step;
  the output must be the target's greedy output token for token (`identical`);
* greedy, B = 8 and 32: `inference.decoding.spec_batch` (a static batch, each row accepting its own drafts, rows
  ragged in position) against the target's own batched greedy decoding at the same B;
* sampled, T 0.7, B = 1: `training.accept.evaluate` (exact rejection sampling);
* greedy, B = 1, k = 1..6 (`--sweep`, on `--sweep-prompts`): acceptance and round cost per k, and the k to run.

On an H200 with SmolLM2-135M (30 layers) and a draft of AL ~2.4 the defaults take about 4-5 minutes, most
of it the sampled run (eager rounds) and the B = 1 runs; `--sweep` with no value or `--skip sweep` saves ~1.

The round cost c (in target steps) is timed apart from the run: `--cost-repeats` replays of one round
(its host read-back included) against as many replays of the target's decode step at the same batch, both
at the positions the run ended at. Break-even AL = c; expected speedup = AL / c. Sampled rounds run eagerly
(no graph to replay apart), so their c is the run's own time per round over the baseline's time per token
(`round_cost_source`). The results file is rewritten after every run: a time-out keeps what was measured.
Falls back to CPU (fp32) where there is no GPU: a slow smoke run on tiny models.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Run as `python benchmarks/gpu_speculative.py` on a GPU machine where the project is not installed: the repository
# root goes first, for the decoders and the accept report it times.
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from speculative_prompts import read_prompts  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_each(fn: Any, repeats: int, device: torch.device) -> float:
    """Mean seconds of one call of fn over `repeats` calls (after two warm-up calls), timed to the device's end."""
    for _ in range(2):
        fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return (time.perf_counter() - start) / repeats


def pooled(counts: list[Any]) -> Any:
    from training.accept import AcceptReport

    report = AcceptReport()
    for c in counts:
        report.add(c)
    return report


def run_row(mode: str, temperature: float, batch: int, k: int, report: Any, cost: float, source: str,
            identical: bool | None) -> dict[str, Any]:
    from training.break_even import break_even_accept_length, describe, expected_speedup

    row: dict[str, Any] = {
        "mode": mode, "temperature": temperature, "batch": batch, "k": k, "prompts": report.prompts,
        "accept_length": round(report.accept_length, 4),
        "per_position_accept": [round(r, 4) for r in report.position_rates],
        "speculative_tok_s": round(report.speculative_tok_s, 1), "baseline_tok_s": round(report.baseline_tok_s, 1),
        "speedup": round(report.speedup, 3), "round_cost_target_steps": round(cost, 3),
        "round_cost_source": source, "break_even_accept_length": round(break_even_accept_length(cost), 3),
        "expected_speedup": round(expected_speedup(report.accept_length, cost), 3),
        "summary": describe(report.accept_length, cost, k, report.speedup)}
    if identical is not None:
        row["identical"] = identical
    return row


@torch.no_grad()
def greedy_single(target: Any, draft: Any, layers: Any, prompts: list[list[int]], *, k: int, max_new: int,
                  eos: set[int], max_len: int, repeats: int, base: Any | None, base_time: tuple[float, int] | None
                  ) -> tuple[Any, float, bool | None, Any, tuple[float, int]]:
    """B = 1 greedy: graph rounds against the graph-replayed target (timed here unless base_time is given)."""
    from inference.decoding.spec_graph import GreedyBaseline, GreedyRoundGraph
    from inference.decoding.speculative import RoundCounts

    device = next(target.parameters()).device
    use_graph = device.type == "cuda"
    rounds = GreedyRoundGraph(target, draft, layers, k=k, max_len=max_len, use_graph=use_graph)
    if base is None:
        base = GreedyBaseline(target, max_len=max_len + k + 1, use_graph=use_graph)
    references: list[list[int]] = []
    if base_time is None:
        sync(device)
        start = time.perf_counter()
        references = [base.decode(p, max_new, eos) for p in prompts]
        sync(device)
        base_time = (time.perf_counter() - start, sum(map(len, references)))
    counts = [RoundCounts() for _ in prompts]
    sync(device)
    start = time.perf_counter()
    outs = [rounds.decode(p, max_new, eos, c) for p, c in zip(prompts, counts, strict=True)]
    sync(device)
    spec_s = time.perf_counter() - start
    report = pooled(counts)
    report.prompts, report.speculative_s = len(prompts), spec_s
    report.baseline_s, report.baseline_tokens = base_time
    identical = outs == references if references else None  # None: the baseline was timed in an earlier run
    cost = single_round_cost(rounds, base, repeats, device)
    return report, cost, identical, base, base_time


def single_round_cost(rounds: Any, base: Any, repeats: int, device: torch.device) -> float:
    """A replayed round with its read-back over a replayed decode step, both at the last prompt's end."""
    from training.break_even import round_cost

    saved = [t.clone() for t in (rounds.start, rounds.last, rounds.hidden)]

    def one_round() -> None:
        for t, s in zip((rounds.start, rounds.last, rounds.hidden), saved, strict=True):
            t.copy_(s)
        if rounds.graph is not None:
            rounds.graph.replay()
        else:
            rounds._round()
        rounds.result.tolist()

    token = torch.zeros(1, 1, dtype=torch.long, device=device)
    position = saved[0].view(1, 1).clone()
    return round_cost(seconds_each(one_round, repeats, device),
                      seconds_each(lambda: base.graph.step(token, position), repeats, device))


@torch.no_grad()
def greedy_batched(target: Any, draft: Any, layers: Any, prompts: list[list[int]], *, batch: int, k: int,
                   max_new: int, eos: set[int], max_len: int, repeats: int, schedule: str) -> tuple[Any, float, bool]:
    """Greedy at batch B: ragged batched rounds against the target's own batched greedy decoding, rows refilled as
    they finish (`continuous`) or static groups of B (`static`), the same schedule for both."""
    from inference.decoding.spec_batch import BatchedGreedyBaseline, BatchedGreedyRounds
    from inference.decoding.speculative import RoundCounts
    from training.break_even import round_cost

    device = next(target.parameters()).device
    use_graph = device.type == "cuda"
    rounds = BatchedGreedyRounds(target, draft, layers, batch=batch, k=k, max_len=max_len, use_graph=use_graph)
    base = BatchedGreedyBaseline(target, batch=batch, max_len=max_len + k + 1, use_graph=use_graph)
    groups = [prompts] if schedule == "continuous" else [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    sync(device)
    start = time.perf_counter()
    references = [out for g in groups for out in base.decode(g, max_new, eos)]
    sync(device)
    base_s = time.perf_counter() - start
    counts = [RoundCounts() for _ in prompts]
    sync(device)
    start = time.perf_counter()
    outs: list[list[int]] = []
    for g in groups:
        outs += rounds.decode(g, max_new, eos, counts[len(outs) : len(outs) + len(g)])
    sync(device)
    report = pooled(counts)
    report.prompts, report.speculative_s = len(prompts), time.perf_counter() - start
    report.baseline_s, report.baseline_tokens = base_s, sum(map(len, references))
    # The round cost at B rows, every row live, at the positions the last batch ended at.
    state = (rounds.start, rounds.last, rounds.hidden, rounds.active)
    saved = [t.clone() for t in state]
    saved[3].fill_(1)

    def one_round() -> None:
        for t, s in zip(state, saved, strict=True):
            t.copy_(s)
        rounds.step()
        rounds.result.tolist()

    tokens = torch.zeros(batch, 1, dtype=torch.long, device=device)
    positions = saved[0].view(batch, 1).clone()
    cost = round_cost(seconds_each(one_round, repeats, device),
                      seconds_each(lambda: base.graph.step(tokens, positions), repeats, device))
    return report, cost, outs == references


@torch.no_grad()
def sampled_single(target: Any, draft: Any, layers: Any, prompts: list[list[int]], *, k: int, max_new: int,
                   eos: set[int], max_len: int, temperature: float, repeats: int, seed: int = 0) -> tuple[Any, float]:
    """Sampled at B = 1: one CUDA graph a round (exact rejection sampling, noise pre-drawn from the seeded
    generator) against the target sampling alone over its replayed step; c replayed as the greedy round's is."""
    from inference.decoding.spec_sampled import SampledBaseline, SampledRoundGraph
    from inference.decoding.speculative import RoundCounts

    device = next(target.parameters()).device
    use_graph = device.type == "cuda"
    generator = torch.Generator(device=device)
    rounds = SampledRoundGraph(target, draft, layers, k=k, max_len=max_len, temperature=temperature,
                               generator=generator, use_graph=use_graph)
    base = SampledBaseline(target, max_len=max_len + k + 1, temperature=temperature, generator=generator,
                           use_graph=use_graph)
    sync(device)
    start = time.perf_counter()
    tokens = 0
    for i, p in enumerate(prompts):
        generator.manual_seed(seed + i)
        tokens += len(base.decode(p, max_new, eos))
    sync(device)
    base_time = (time.perf_counter() - start, tokens)
    counts = [RoundCounts() for _ in prompts]
    sync(device)
    start = time.perf_counter()
    for i, (p, c) in enumerate(zip(prompts, counts, strict=True)):
        generator.manual_seed(seed + 10_000 + i)
        rounds.decode(p, max_new, eos, c)
    sync(device)
    report = pooled(counts)
    report.prompts, report.speculative_s, report.temperature = len(prompts), time.perf_counter() - start, temperature
    report.baseline_s, report.baseline_tokens = base_time
    return report, single_round_cost(rounds, base, repeats, device)


def table(runs: list[dict[str, Any]]) -> str:
    head = f"{'mode':14} {'T':>4} {'B':>3} {'k':>2} {'n':>3} {'AL':>5} {'b-even':>6} {'spec/s':>8} {'base/s':>8} " \
           f"{'speedup':>7} {'expect':>6} ident  per-position"
    lines = [head]
    for r in runs:
        ident = "" if "identical" not in r else ("yes" if r["identical"] else "NO")
        mode = r["mode"] + {"continuous": "/cont", "static": "/static"}.get(r.get("schedule", ""), "")
        lines.append(f"{mode:14} {r['temperature']:>4} {r['batch']:>3} {r['k']:>2} {r['prompts']:>3} "
                     f"{r['accept_length']:>5.2f} {r['break_even_accept_length']:>6.2f} {r['speculative_tok_s']:>8.1f} "
                     f"{r['baseline_tok_s']:>8.1f} {r['speedup']:>6.2f}x {r['expected_speedup']:>5.2f}x {ident:5}  "
                     f"{' '.join(f'{a:.2f}' for a in r['per_position_accept'])}")
    return "\n".join(lines)


def load_target(path: Path, device: torch.device) -> tuple[Any, Any]:
    """The target (bf16 on a GPU, fp32 on CPU, as the trainer loads it) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    model = model.to(device).eval()
    model.requires_grad_(False)
    return model, AutoTokenizer.from_pretrained(str(path))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--prompts", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts-per-run", type=int, default=32)
    parser.add_argument("--max-new", type=int, default=256)
    parser.add_argument("--max-prompt", type=int, default=1024, help="Skip prompts longer than this many tokens.")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--schedules", nargs="+", default=["continuous", "static"], choices=["continuous", "static"],
                        help="Batched runs: rows refilled as they finish (on 4 x B prompts, at least "
                             "--prompts-per-run), and/or static groups of B (on --prompts-per-run prompts).")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--sweep", type=int, nargs="*", default=[1, 2, 3, 4, 6],
                        help="Other chain lengths to run greedy at B = 1 (empty: none).")
    parser.add_argument("--sweep-prompts", type=int, default=16,
                        help="Prompts per sweep run (0: all); its baseline is timed once on them.")
    parser.add_argument("--cost-repeats", type=int, default=100)
    parser.add_argument("--skip", nargs="*", default=[], choices=["greedy", "batched", "sampled", "sweep"])
    args = parser.parse_args(argv)

    from inference.decoding.attention_kernels import without_cudnn
    from inference.decoding.hidden_states import target_embeddings
    from training.break_even import describe, recommend_k
    from training.export import load_draft

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    t0 = time.perf_counter()
    target, tokenizer = load_target(args.target, device)
    draft, layers = load_draft(args.draft, target_embeddings(target).cpu(),
                               target_layers=target.config.num_hidden_layers)
    draft = draft.to(device=device, dtype=target.dtype).eval()
    batched_prompts = read_prompts(args.prompts, tokenizer, max(args.prompts_per_run, 4 * max(args.batches)),
                                   args.max_prompt)
    prompts = batched_prompts[: args.prompts_per_run]
    if not prompts:
        raise SystemExit("no prompts to run")
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    max_len = max(map(len, batched_prompts)) + args.max_new + max([args.k, *args.sweep]) + 2
    doc: dict[str, Any] = {
        "target": args.target.name, "draft": args.draft.name,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu", "torch": torch.__version__,
        "command": " ".join(["python", "benchmarks/gpu_speculative.py", *(argv if argv is not None else sys.argv[1:])]),
        "max_new": args.max_new, "prompt_files": [p.name for p in args.prompts],
        "batched_decoding": "ragged: each row keeps its own position and accepts its own drafts; schedule "
                            "continuous refills a finished row with the next prompt at once, static runs groups of "
                            "B until their last row ends (both for the target alone too)",
        "runs": []}

    def save(row: dict[str, Any]) -> None:
        doc["runs"].append(row)
        doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"[{doc['elapsed_s']:>6.1f}s] {row['mode']} B={row['batch']} k={row['k']}: {row['summary']}"
              + (f" identical={row['identical']}" if "identical" in row else ""), flush=True)

    costs: dict[int, float] = {}
    rates: list[float] = []
    with without_cudnn():
        base, base_time = None, None
        if "greedy" not in args.skip and 1 in args.batches:
            report, cost, identical, base, base_time = greedy_single(
                target, draft, layers, prompts, k=args.k, max_new=args.max_new, eos=eos, max_len=max_len,
                repeats=args.cost_repeats, base=None, base_time=None)
            costs[args.k], rates = cost, report.position_rates
            save(run_row("greedy", 0.0, 1, args.k, report, cost, "replayed", identical))
        if "batched" not in args.skip:
            for batch in [b for b in args.batches if b > 1]:
                for schedule in args.schedules:
                    many = prompts if schedule == "static" else batched_prompts[: max(len(prompts), 4 * batch)]
                    report, cost, identical = greedy_batched(target, draft, layers, many, batch=batch, k=args.k,
                                                             max_new=args.max_new, eos=eos, max_len=max_len,
                                                             repeats=args.cost_repeats, schedule=schedule)
                    save({**run_row("greedy", 0.0, batch, args.k, report, cost, "replayed", identical),
                          "schedule": schedule})
        if "sampled" not in args.skip:
            report, cost = sampled_single(target, draft, layers, prompts, k=args.k, max_new=args.max_new, eos=eos,
                                          max_len=max_len, temperature=args.temperature, repeats=args.cost_repeats)
            save(run_row("sampled", args.temperature, 1, args.k, report, cost, "replayed", None))
        if "sweep" not in args.skip and base is not None:
            few = 0 < args.sweep_prompts < len(prompts)
            sweep_prompts = prompts[: args.sweep_prompts] if few else prompts
            for k in [k for k in args.sweep if k != args.k]:
                # The baseline does not depend on k: timed once on these prompts, reused across the sweep.
                report, cost, identical, base, sweep_time = greedy_single(
                    target, draft, layers, sweep_prompts, k=k, max_new=args.max_new, eos=eos, max_len=max_len,
                    repeats=args.cost_repeats, base=base, base_time=base_time if sweep_prompts is prompts else None)
                if sweep_prompts is not prompts:
                    base_time, prompts = sweep_time, sweep_prompts  # the next sweep run reuses this timing
                costs[k] = cost
                if len(report.position_rates) > len(rates):
                    rates = report.position_rates
                save(run_row("greedy", 0.0, 1, k, report, cost, "replayed", identical))
    if rates and costs:
        doc["recommended_k"] = recommend_k(rates, costs, sorted({*costs, *range(1, len(rates) + 1)}))
        doc["round_cost_by_k"] = {str(k): round(c, 3) for k, c in sorted(costs.items())}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(table(doc["runs"]))
    for r in doc["runs"]:
        print(f"{r['mode']} T={r['temperature']} B={r['batch']}: "
              f"{describe(r['accept_length'], r['round_cost_target_steps'], r['k'], r['speedup'])}")
    if "recommended_k" in doc:
        rec = doc["recommended_k"]
        print(f"recommended k={rec['k']} (greedy, B=1): expected AL {rec['expected_accept_length']}, "
              f"cost {rec['round_cost_target_steps']} steps, {rec['expected_speedup']}x expected")
    return doc


if __name__ == "__main__":
    main()
