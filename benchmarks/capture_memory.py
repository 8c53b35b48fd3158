"""Peak memory per rank of `datahunt capture`, one process against `torchrun` ranks with `--shard-target`.

The target is a random Qwen2 whose weights dominate the process (~180M parameters, ~0.7 GB in fp32 on CPU,
as hidden 1024 x 12 layers or hidden 512 x 48 layers), with a word-level tokenizer; 32 short conversations.
For each N it runs the capture (N = 1: one process, target whole; N >= 2: gloo ranks, target FSDP2-sharded)
and records, per rank, the target bytes it holds (its parameter shards and the buffers), its peak RSS and its
private (anonymous) resident memory at the end, from the cache's `capture_runs.jsonl`. Writes
benchmarks/results/capture_memory.json.

Usage: `python benchmarks/capture_memory.py [--ranks 1 2] [--shape 1024x12] [--work /tmp/capture_memory]`; each
shape's runs replace that shape's entry in the results file.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from ddp_check import WORDS, make_tokenizer

RESULTS = Path(__file__).parent / "results" / "capture_memory.json"


def make_target(folder: Path, hidden: int, layers: int) -> int:
    """Save the random Qwen2 target and its tokenizer; return its parameter count."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = make_tokenizer()
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
                                         num_hidden_layers=layers, num_attention_heads=hidden // 64,
                                         num_key_value_heads=hidden // 256,
                                         max_position_embeddings=512, tie_word_embeddings=False))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def make_data(path: Path, rows: int = 32) -> None:
    rng = random.Random(0)
    path.write_text("".join(json.dumps({"id": f"r{i}", "conversations": [
        {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))},
        {"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(16, 80)))}]}) + "\n"
        for i in range(rows)))


def capture(ranks: int, target: Path, data: Path, out: Path) -> list[dict[str, int]]:
    datahunt = Path(sys.executable).parent / "datahunt"
    args = [str(datahunt), "capture", "--data", str(data), "--target", str(target), "--out", str(out),
            "--device", "cpu", "--shard-mb", "4"]
    if ranks > 1:
        args = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--no-python",
                *args, "--shard-target"]
    subprocess.run(args, check=True, capture_output=True, text=True)
    ranks_seen: list[dict[str, int]] = json.loads((out / "capture_runs.jsonl").read_text().splitlines()[-1])["ranks"]
    return ranks_seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shape", default="1024x12", help="HIDDENxLAYERS of the target")
    parser.add_argument("--work", type=Path, default=Path("/tmp/capture_memory"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    hidden, layers = (int(x) for x in args.shape.split("x"))
    params = make_target(args.work / "target", hidden, layers)
    make_data(args.work / "data.jsonl")
    runs = []
    for n in args.ranks:
        ranks = capture(n, args.work / "target", args.work / "data.jsonl", args.work / f"cache_{n}")
        mib = {k: [round(r[k] / 2**20, 1) for r in ranks] for k in ("target_bytes_held", "peak_rss_bytes",
                                                                      "rss_anon_bytes") if k in ranks[0]}
        runs.append({"ranks": n, "per_rank_mib": mib})
        print(f"N={n}: " + ", ".join(f"{k} {v} MiB" for k, v in mib.items()))
    RESULTS.parent.mkdir(exist_ok=True)
    doc = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    doc["what"] = "datahunt capture, memory per rank (CPU, gloo, fp32 target), 1 process vs N sharded ranks"
    doc.setdefault("shapes", {})[args.shape] = {
        "target": {"arch": "Qwen2", "hidden": hidden, "layers": layers, "parameters": params,
                   "fp32_mib": round(params * 4 / 2**20, 1)}, "runs": runs}
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")

if __name__ == "__main__":
    main()
