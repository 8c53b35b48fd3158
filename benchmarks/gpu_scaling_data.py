"""The device plan's files, shared by every stage of benchmarks/gpu_scaling.py and the modules beside it.

WORK/results.json (`Results`, saved after every stage and copied into --out as scaling_raw.json), JSONL rows read
and written whole (gzip where the name ends .gz), the mirror's prompts unpacked from the carried data, and the
held-out eval prompts. It imports no other benchmark module: the stage modules import it, never the reverse.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

EVAL_SETS = ("alpaca", "humaneval", "gsm8k", "qa")


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh.read().split("\n") if line.strip()]


def save_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")


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


def mirror_prompts(args: argparse.Namespace) -> Path:
    """WORK/prompts.jsonl, the mirror's prompts, unpacked from the carried data on first use."""
    prompts = Path(args.work) / "prompts.jsonl"
    if not prompts.exists():
        save_jsonl(prompts, load_jsonl(Path(args.data) / "prompts.jsonl.gz"))
    return prompts


def eval_prompts(mirror: Path) -> list[dict[str, str]]:
    """Every prompt (turn 1) of the EAGLE-bench sets and MT-bench in the mirror."""
    out: list[dict[str, str]] = []
    for name in EVAL_SETS:
        for q in load_jsonl(mirror / "SafeAILab/EAGLE-bench" / name / "question.jsonl"):
            out.append({"set": name, "id": f"{name}-{q['question_id']}", "prompt": q["turns"][0]})
    for q in load_jsonl(mirror / "HuggingFaceH4/mt_bench_prompts/question.jsonl"):
        out.append({"set": "mt_bench", "id": f"mt_bench-{q['question_id']}", "prompt": q["turns"][0]})
    return out


def eval_items(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The eval prompts, the first --eval-per-set of each set."""
    evals = load_jsonl(Path(args.data) / "eval.jsonl")
    seen: Counter[str] = Counter()
    out = []
    for e in evals:
        if seen[e["set"]] < args.eval_per_set:
            out.append(e)
            seen[e["set"]] += 1
    return out
