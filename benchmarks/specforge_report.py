"""The SpecForge side-by-side's report (benchmarks/specforge_side.py): specforge.json in the published schema, both
trainers' accept lengths, steps and throughput with their configs, the known differences between them, and
datahunt's published 16K point beside them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specforge_recipe import mean_of_sets, pooled
from specforge_state import State

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "docs" / "results" / "scaling.json"

DIFFERENCES = [
    "Loss averaging: SpecForge's per-TTT-step loss is the soft cross-entropy summed over the counted positions "
    "and divided by every position of the padded micro-batch (prompt and padding included), then divided by the "
    "accumulation steps; datahunt divides by the positions counted at that step. Both weight step j by 0.8^j.",
    "Mask: the stored token ids and loss masks are equal (220 rows checked on CPU); SpecForge zeroes the last "
    "position and shifts its mask by two tokens at each assistant span's edges as it unrolls; both count a "
    "position only where the target's own choice lies inside the draft vocab.",
    "Batching: SpecForge draws 8 rows a micro-batch in random order, pads them to the longest, and accumulates "
    "7 micro-batches a step (the budget holds on average: real tokens a step vary with the rows drawn); datahunt "
    "packs length-sorted rows up to 16,384 padded tokens into one batch a step (no accumulation).",
    "Target states: SpecForge trains offline from features written once (bf16, features_s reported apart); "
    "datahunt runs the target forward at every step, so its tok_s includes the target.",
    "Precision: SpecForge keeps bf16 draft weights with fp32 AdamW masters; datahunt keeps fp32 weights under "
    "bf16 autocast. Both AdamW (no weight decay), cosine with 1.5% warmup, gradient clip 0.5.",
    "Draft vocab: each builds its own 32,000 most frequent supervised target tokens from the same rows.",
    "Attention: SpecForge's draft attends over its TTT cache with sdpa (attention_backend sdpa); datahunt's "
    "with its own TTT attention. Same capture layers (output-of-layer 1, 14, 26 = input-of-layer 2, 15, 27).",
]


def published_16k() -> dict[str, Any] | None:
    """datahunt's published 16K regenerated point (docs/results/scaling.json, an earlier trainer), same replay."""
    if not PUBLISHED.exists():
        return None
    runs = [r for r in json.loads(PUBLISHED.read_text())["runs"] if r["samples"] == 16000 and r["regenerated"]]
    if not runs:
        return None
    per = {r["eval_set"]: {"accept_length": r["accept_length"], "rounds": r["rounds"], "tokens": r["tokens"]}
           for r in runs}
    return {"accept_length": pooled(per), "mean_of_sets": mean_of_sets(per),
            "per_set": {k: v["accept_length"] for k, v in sorted(per.items())},
            "steps": runs[0]["steps"], "train_s": runs[0]["train_wall_s"], "tok_s": runs[0]["train_tokens_per_s"]}


def build_report(st: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The published schema: data, samples, target, eval_sets, and per trainer accept_length, per_set, steps,
    train_s, tok_s (each with its config), the known differences, and the comparison."""
    setup_rec, feats, sf = st["setup"], st.get("features", {}), st.get("sf_train", {})
    dh = st.get("dh_train", {})
    sets = sorted(set(st.get("eval_sf", {})) | set(st.get("eval_dh", {})))

    def side(per_set: dict[str, Any], train: dict[str, Any]) -> dict[str, Any]:
        return {"accept_length": pooled(per_set) if per_set else None, "mean_of_sets": mean_of_sets(per_set),
                "per_set": per_set,
                "steps": train.get("steps"), "train_s": train.get("train_s"), "tok_s": train.get("tok_s")}

    sf_side = side(st.get("eval_sf", {}), sf)
    last = sf.get("last_log", {})
    sf_side.update({
        "tokens": sf.get("tokens"), "wall_s": sf.get("wall_s"), "calls": sf.get("calls"),
        "features_s": feats.get("seconds_all_calls"), "features_gib": feats.get("disk_gib"),
        "tok_s_with_features": round(sf["tokens"] / (sf["train_s"] + feats["seconds_all_calls"]), 1)
        if sf.get("tokens") and sf.get("train_s") else None,
        "last_logged": {k: last[k] for k in ("step", "loss", "acc", "lr") if k in last},
        "config": {**(sf.get("plan") or {}), "lr": args.lr, "lr_scheduler": "cosine", "warmup_ratio": 0.015,
                   "max_grad_norm": 0.5, "ttt_length": args.ttt, "draft_vocab": args.draft_vocab,
                   "max_length": args.max_length, "attention_backend": "sdpa", "mode": "offline",
                   "capture_layers_output_of": setup_rec["sf_capture_layers"],
                   "save_interval": args.sf_save_interval, "max_checkpoints": 3, "version": "specforge 0.2.0"}})
    dh_side = side(st.get("eval_dh", {}), dh)
    dh_side.update({k: dh.get(k) for k in ("tokens", "tokens_per_step", "final_loss", "step_accuracies",
                                           "vocab_coverage", "peak_memory_gib", "config")})
    comparison: dict[str, Any] = {}
    if sf_side["accept_length"] and dh_side["accept_length"]:
        comparison = {"accept_length_datahunt_over_specforge": round(dh_side["accept_length"]
                                                                     / sf_side["accept_length"], 4),
                      "per_set_datahunt_minus_specforge": {
                          k: round(dh_side["per_set"][k]["accept_length"] - sf_side["per_set"][k]["accept_length"], 4)
                          for k in sets if k in dh_side["per_set"] and k in sf_side["per_set"]}}
    return {
        "rehearsal": setup_rec["rehearsal"],
        "data": {"rows": setup_rec["samples"], "source": "the first rows of the regenerated set as "
                 "`benchmarks/gpu_scaling.sh setup` lays it out (benchmarks/results/gpu_scaling/"
                 "regenerated_smollm2_16k.jsonl.gz, then the second and third answers)",
                 "sha256": setup_rec["rows_sha256"], "specforge_rows_with_loss": feats.get("rows"),
                 "mean_tokens": feats.get("mean_tokens")},
        "samples": setup_rec["samples"],
        "target": "SmolLM2-135M-Instruct" if setup_rec["target_layers"] == 30
        else f"SmolLM2-135M-Instruct cut to {setup_rec['target_layers']} layers (a rehearsal's toy)",
        "eval_sets": sets,
        "evaluator": f"greedy replay, chain k={args.k} (benchmarks/gpu_scaling_curve.replay_on, as "
                     "docs/results/scaling.md): the target's greedy answers of "
                     "benchmarks/results/gpu_scaling/eval_greedy.jsonl.gz, first "
                     f"{args.eval_per_set} prompts of each set; accept_length pools every set's rounds",
        "env": setup_rec["env"], "settings": setup_rec["settings"],
        "specforge": sf_side, "datahunt": dh_side, "comparison": comparison,
        "batching": st.get("batch_stats"), "datahunt_published_16k": published_16k(), "differences": DIFFERENCES,
    }


def report(args: argparse.Namespace, st: State, limit_s: float) -> bool:
    doc = build_report(st.data, args)
    path = Path(args.w) / "specforge.json"
    path.parent.mkdir(parents=True, exist_ok=True)  # a report from a returned state, on a machine without $W
    path.write_text(json.dumps(doc, indent=1) + "\n")
    if args.publish:
        if doc["rehearsal"]:
            raise SystemExit("a rehearsal's numbers are a toy's: not publishing them")
        Path(args.publish).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("samples", "target", "eval_sets", "comparison")}, indent=1))
    return True
