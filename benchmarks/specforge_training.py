"""SpecForge's own stages of the side-by-side (benchmarks/specforge_side.py): `features` (its offline feature files
of the rows), `sf-train` (`specforge train`, its step plan from the token budget, resumed from its last checkpoint
after a time limit) and `sf-export` (`specforge export --to sglang`), each one child process in SpecForge's site.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

from specforge_processes import run_child, sf_env
from specforge_recipe import accumulation, batch_stats, loop_seconds, sf_total_steps
from specforge_state import State

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "benchmarks" / "specforge"
SF_CONFIG = RECIPE / "eagle3_offline.yaml"
RUN_ID = "smollm2-eagle3-sf"


def features(args: argparse.Namespace, st: State, limit_s: float) -> bool:
    w = Path(args.w)
    cmd = [args.python, str(RECIPE / "sf_prepare_hf.py"), "--target", str(w / "target_sf"), "--data",
           str(w / "rows.jsonl"), "--out", str(w / "features"), "--max-length", str(args.max_length),
           "--chat-template", "smollm2", "--draft-config", str(w / "draft_config.json"), "--skip-existing"]
    summary = w / "features" / "features.json"
    summary.unlink(missing_ok=True)
    res = run_child(cmd, sf_env(args, st.data["setup"]["cuda"]), limit_s, w / "logs" / "features.log")
    rec = st.data.setdefault("features", {"calls": []})
    rec["calls"].append({"rc": res["rc"], "stopped": res["stopped"], "wall_s": res["wall_s"]})
    if res["rc"] != 0 or not summary.exists():
        if not res["stopped"]:
            raise SystemExit(f"features failed (rc {res['rc']}): see {w / 'logs' / 'features.log'}")
        return False
    rec.update(json.loads(summary.read_text()))
    rec["seconds_all_calls"] = round(sum(c["wall_s"] for c in rec["calls"]), 1)
    lengths = json.loads((w / "features" / "lengths.json").read_text())
    accum = args.sf_accum or accumulation(args.batch_tokens, args.sf_batch, rec["mean_tokens"])
    st.data["batch_stats"] = batch_stats(lengths["tokens"], lengths["supervised"], args.sf_batch, accum,
                                         args.batch_tokens)
    print(json.dumps(st.data["batch_stats"]))
    rec["disk_gib"] = round(sum(f.stat().st_size for f in (w / "features").rglob("*.ckpt")) / 2**30, 2)
    return True


def sf_plan(args: argparse.Namespace, st: State) -> dict[str, Any]:
    feats = st.data["features"]
    accum = args.sf_accum or accumulation(args.batch_tokens, args.sf_batch, feats["mean_tokens"])
    steps = sf_total_steps(feats["rows"], args.sf_batch, accum, args.epochs)
    if steps < 1:
        raise SystemExit(f"{feats['rows']} rows give SpecForge no whole step at batch {args.sf_batch} x {accum}")
    return {"batch_size": args.sf_batch, "accumulation_steps": accum, "epochs": args.epochs, "max_steps": steps,
            "rows_per_step": args.sf_batch * accum,
            "real_tokens_per_step": round(args.sf_batch * accum * feats["mean_tokens"], 1)}


def sf_step_done(w: Path) -> int:
    """The step of SpecForge's newest complete checkpoint (its `-latest` link), 0 without one."""
    link = w / "sf_out" / f"{RUN_ID}-latest"
    if not link.exists():
        return 0
    match = re.search(r"-step(\d+)$", os.readlink(link) if link.is_symlink() else link.name)
    return int(match.group(1)) if match else 0


def sf_train(args: argparse.Namespace, st: State, limit_s: float) -> bool:
    w = Path(args.w)
    plan = sf_plan(args, st)
    rec = st.data.setdefault("sf_train", {"calls": []})
    rec["plan"] = plan
    done = sf_step_done(w)
    if done >= plan["max_steps"]:
        return True
    cap = min(plan["max_steps"], done + args.sf_steps_per_call) if args.sf_steps_per_call else plan["max_steps"]
    setup_rec = st.data["setup"]
    overrides = {
        "model.target_model_path": w / "target_sf", "model.draft_model_config": w / "draft_config.json",
        "model.embedding_key": setup_rec["embedding_key"], "model.lm_head_key": setup_rec["lm_head_key"],
        "data.hidden_states_path": w / "features", "data.cache_dir": w / "sf_cache", "data.max_length": args.max_length,
        "output_dir": w / "sf_out", "training.batch_size": plan["batch_size"],
        "training.accumulation_steps": plan["accumulation_steps"], "training.num_epochs": args.epochs,
        "training.total_steps": plan["max_steps"], "training.max_steps": cap, "training.learning_rate": args.lr,
        "training.ttt_length": args.ttt, "training.save_interval": args.sf_save_interval,
        "training.log_interval": args.sf_log_interval, "training.max_checkpoints": 3, "run_id": RUN_ID,
        **({} if setup_rec["cuda"] else {"data.dataloader_num_workers": 0}),
        **({"training.resume_from": w / "sf_out"} if done else {}),
    }
    cmd = [args.python, "-m", "specforge.cli", "train", "--config", str(SF_CONFIG),
           *(f"{k}={v}" for k, v in overrides.items())]
    limit = min(limit_s, args.sf_call_s) if args.sf_call_s else limit_s
    res = run_child(cmd, sf_env(args, setup_rec["cuda"]), limit, w / "logs" / "sf_train.log",
                    stop_at_step=args.sf_stop_at_step)
    reached = sf_step_done(w)
    loop = loop_seconds(res["steps"], done, reached, res["wall_s"], res["last"].get("perf/optimizer_step_time_s"))
    rec["calls"].append({"rc": res["rc"], "stopped": res["stopped"], "wall_s": res["wall_s"], "from_step": done,
                         "checkpoint_step": reached, "logged_steps": [s for s, _ in res["steps"]][-3:],
                         "loop_s": round(loop, 1)})
    if res["last"]:
        rec["last_log"] = res["last"]
    if res["rc"] != 0 and not res["stopped"]:
        raise SystemExit(f"specforge train failed (rc {res['rc']}): see {w / 'logs' / 'sf_train.log'}")
    if reached < plan["max_steps"]:
        return False
    feats = st.data["features"]
    rec["steps"] = reached
    rec["train_s"] = round(sum(c["loop_s"] for c in rec["calls"]), 1)
    rec["wall_s"] = round(sum(c["wall_s"] for c in rec["calls"]), 1)
    rec["tokens"] = round(reached * plan["rows_per_step"] * feats["mean_tokens"])
    rec["tok_s"] = round(rec["tokens"] / rec["train_s"], 1) if rec["train_s"] else None
    return True


def sf_export(args: argparse.Namespace, st: State, limit_s: float) -> bool:
    w = Path(args.w)
    out = w / "sf_export"
    if (out / "model.safetensors").exists():
        return True
    cmd = [args.python, "-m", "specforge.cli", "export", "--to", "sglang", "--checkpoint",
           str(w / "sf_out" / f"{RUN_ID}-latest"), "--draft-config", str(w / "draft_config.json"),
           "--output-dir", str(out)]
    res = run_child(cmd, sf_env(args, st.data["setup"]["cuda"]), limit_s, w / "logs" / "sf_export.log")
    if res["rc"] != 0:
        raise SystemExit(f"specforge export failed (rc {res['rc']}): see {w / 'logs' / 'sf_export.log'}")
    st.data["sf_export"] = {"dir": str(out), "bytes": (out / "model.safetensors").stat().st_size}
    return True
