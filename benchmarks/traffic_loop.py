"""The traffic loop's small steps around datahunt's own commands (docs/results/traffic_loop.md runs them in order).

    python benchmarks/traffic_loop.py log PROMPTS.jsonl[.xz|.gz] --out WORK/logs/requests.jsonl [--seed 0]
        A request log made of prompts the deployed draft never trained on: each prompt one logged OpenAI chat
        request (`request.messages`, `metadata.category`), at one-minute steps from 2026-11-01 in a seeded
        order, so `datahunt traffic-split` has a time order to cut (the categories interleave, as traffic does).
    python benchmarks/traffic_loop.py manifest --split WORK/traffic --target TARGET_DIR --out WORK/manifest.json
        The manifest of one `kind: traffic` source, the split's train.jsonl (its path relative to the manifest).
    python benchmarks/traffic_loop.py report --candidate NEW --deployed OLD [--out docs/results/traffic_loop.json]
        Both drafts' tables from the candidate's gate.json (and each draft's expectations.json where recorded),
        as Markdown on stdout and JSON in --out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from core.draft_expectations import read_expectations
from core.gate_verdict import read_gate_verdict

START = datetime(2026, 11, 1, tzinfo=UTC)


def _lines(path: Path) -> list[str]:
    opener = lzma.open if path.suffix == ".xz" else gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:  # type: ignore[operator]
        return [line for line in handle if line.strip()]


def make_log(prompts: Path, out: Path, seed: int) -> dict[str, Any]:
    """Write the request log; return its counts."""
    rows = [json.loads(line) for line in _lines(prompts)]
    random.Random(seed).shuffle(rows)
    records = []
    for i, row in enumerate(rows):
        turns = row.get("messages") or row.get("conversations") or [{"role": "user", "content": row.get("prompt")}]
        user = [t for t in turns if (t.get("role") or t.get("from")) in ("user", "human")][:1]
        if not user or not (user[0].get("content") or user[0].get("value")):
            continue
        text = user[0].get("content") or user[0].get("value")
        records.append({"timestamp": (START + timedelta(minutes=i)).isoformat().replace("+00:00", "Z"),
                        "metadata": {"category": row.get("category") or row.get("set") or "general_chat"},
                        "request": {"model": "target", "messages": [{"role": "user", "content": text}]}})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return {"records": len(records), "from": records[0]["timestamp"], "to": records[-1]["timestamp"]}


def make_manifest(split: Path, target: str, out: Path) -> dict[str, Any]:
    """Write a manifest whose one source is the split's train.jsonl as a traffic source."""
    manifest = {"schema_version": 1, "target": {"model": target},
                "sources": [{"kind": "traffic", "path": os.path.relpath(split / "train.jsonl", out.parent),
                             "category": "general_chat", "hub_id": "team/traffic-train"}]}
    out.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _position_rates(folder: Path) -> dict[str, list[float]]:
    expectations = read_expectations(folder)
    return {name: [round(r, 3) for r in s.per_position_accept] for name, s in (expectations.sets.items()
                                                                              if expectations else [])}


def report(candidate: Path, deployed: Path, out: Path | None) -> str:
    """The Markdown tables of the gate's verdict; the JSON beside when asked."""
    verdict = read_gate_verdict(candidate)
    if verdict is None:
        raise SystemExit(f"{candidate} has no gate.json: run `datahunt gate` first")
    lines = [f"Gate: **{'passed' if verdict.passed else 'failed'}** (margin {verdict.rule.margin:.1%}, tolerance "
             f"{verdict.rule.tolerance:.1%}; {verdict.evaluator}; prompts `{verdict.prompts_file}`).", "",
             "| set | prompts | deployed AL | candidate AL | change | deployed pos-0 | candidate pos-0 | change |",
             "|---|---|---|---|---|---|---|---|"]
    for row in [verdict.overall, *verdict.sets]:
        lines.append(f"| {row.name} | {row.prompts} | {row.deployed_accept_length:.3f} | "
                     f"{row.candidate_accept_length:.3f} | {row.accept_length_change:+.1%} | "
                     f"{row.deployed_position0:.3f} | {row.candidate_position0:.3f} | {row.position0_change:+.1%} |")
    lines += ["", *[f"- {reason}" for reason in verdict.reasons]]
    if out is not None:
        out.write_text(json.dumps({"gate": verdict.model_dump(), "recorded_per_position": {
            "candidate": _position_rates(candidate), "deployed": _position_rates(deployed)}}, indent=2) + "\n")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    log = sub.add_parser("log")
    log.add_argument("prompts", type=Path)
    log.add_argument("--out", type=Path, required=True)
    log.add_argument("--seed", type=int, default=0)
    man = sub.add_parser("manifest")
    man.add_argument("--split", type=Path, required=True)
    man.add_argument("--target", required=True)
    man.add_argument("--out", type=Path, required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--candidate", type=Path, required=True)
    rep.add_argument("--deployed", type=Path, required=True)
    rep.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.step == "log":
        print(json.dumps(make_log(args.prompts, args.out, args.seed)))
    elif args.step == "manifest":
        print(json.dumps(make_manifest(args.split, args.target, args.out)))
    else:
        print(report(args.candidate, args.deployed, args.out), end="")


if __name__ == "__main__":
    main()
