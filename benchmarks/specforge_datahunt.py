"""datahunt's side of the side-by-side and the replay of both drafts (benchmarks/specforge_side.py): `dh-train`
(datahunt's trainer on the same rows, the same layers and budget) and `eval-sf`, `eval-dh` (the replay evaluator of
docs/results/scaling.md, `gpu_scaling_curve.replay_on`), each run as a child command of specforge_side.py
(`dh-child`, `eval-child`) so that a time limit's TERM checkpoints the step in flight.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from specforge_processes import dh_env, run_child
from specforge_recipe import datahunt_layers, eval_pairs
from specforge_state import State

SIDE = Path(__file__).resolve().with_name("specforge_side.py")  # the command line the children run


def dh_train(args: argparse.Namespace, st: State, limit_s: float) -> bool:
    w = Path(args.w)
    if (w / "dh_result.json").exists():
        return True
    res = run_child([args.python, str(SIDE), "dh-child", *child_args(args)], dh_env(), limit_s,
                    w / "logs" / "dh_train.log")
    rec = st.data.setdefault("dh_train", {"calls": []})
    rec["calls"].append({"rc": res["rc"], "stopped": res["stopped"], "wall_s": res["wall_s"]})
    if (w / "dh_result.json").exists():
        rec.update(json.loads((w / "dh_result.json").read_text()))
        return True
    if res["stopped"] or res["rc"] in (128 + signal.SIGTERM, 128 + signal.SIGINT):
        return False
    raise SystemExit(f"datahunt training failed (rc {res['rc']}): see {w / 'logs' / 'dh_train.log'}")


def dh_config(args: argparse.Namespace, sf_layers: list[int]) -> dict[str, Any]:
    w = Path(args.w)
    cfg: dict[str, Any] = {
        "data": str(w / "rows.jsonl"), "target": str(Path(args.work) / "target"), "out": str(w / "dh_run"),
        "messages_field": "conversations", "max_length": args.max_length, "ttt_steps": args.ttt,
        "draft_vocab_size": args.draft_vocab, "aux_layer_ids": list(datahunt_layers(sf_layers)),
        "head_init": "random", "lr": args.lr, "epochs": args.epochs, "batch_tokens": args.batch_tokens,
        "save_every": args.dh_save_every, "log_every": 100, "resume": True, "seed": 0, "export_engine": "sglang"}
    if args.dh_max_steps:
        cfg["max_steps"] = args.dh_max_steps
    return cfg


def dh_child(args: argparse.Namespace) -> None:
    """datahunt's trainer on the rows (its own process: a time limit's TERM checkpoints the step in flight)."""
    import logging

    from training.config import make_config
    from training.interrupt import TrainingStopped
    from training.progress import peak_memory_gib
    from training.trainer import train

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    w = Path(args.w)
    st = json.loads((w / "state.json").read_text())
    values = dh_config(args, st["setup"]["sf_capture_layers"])
    cfg = make_config(values)
    try:
        result = train(cfg)
    except TrainingStopped as exc:
        print(f"dh-train: {exc}", flush=True)
        sys.exit(exc.exit_code)
    out = {"steps": result.steps, "final_loss": round(result.loss, 4),
           "step_accuracies": [round(a, 3) for a in result.step_accuracies],
           "vocab_coverage": round(result.vocab_coverage, 4), "train_s": round(result.wall_s, 1),
           "tokens": result.tokens, "tok_s": round(result.tokens_per_s, 1),
           "tokens_per_step": round(result.tokens / max(1, result.steps), 1), "peak_memory_gib": peak_memory_gib(),
           "export": str(result.export_dir), "config": {k: v for k, v in values.items()
                                                        if k not in {"data", "target", "out"}}}
    tmp = w / "dh_result.json.tmp"
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(w / "dh_result.json")
    print(json.dumps(out))


def evaluate(args: argparse.Namespace, st: State, limit_s: float, which: str) -> bool:
    w = Path(args.w)
    result = w / f"eval_{which}.json"
    sets = eval_pairs(Path(args.eval_answers), args.eval_per_set)
    have = json.loads(result.read_text()) if result.exists() else {}
    if set(have) >= set(sets):
        st.data[f"eval_{which}"] = have
        return True
    res = run_child([args.python, str(SIDE), "eval-child", "--which", which, *child_args(args)],
                    dh_env(), limit_s, w / "logs" / f"eval_{which}.log")
    have = json.loads(result.read_text()) if result.exists() else {}
    st.data[f"eval_{which}"] = have
    if res["rc"] != 0 and not res["stopped"]:
        raise SystemExit(f"eval of {which} failed (rc {res['rc']}): see {w / 'logs' / f'eval_{which}.log'}")
    return set(have) >= set(sets)


def eval_child(args: argparse.Namespace) -> None:
    """Replay one draft on every eval set not yet scored; each set's score saved as it is done."""
    from gpu_scaling_curve import _score, replay_on

    w = Path(args.w)
    export = w / "sf_export" if args.which == "sf" else Path(json.loads((w / "dh_result.json").read_text())["export"])
    result = w / f"eval_{args.which}.json"
    have: dict[str, Any] = json.loads(result.read_text()) if result.exists() else {}
    replay_args = argparse.Namespace(work=args.work)
    for name, pairs in sorted(eval_pairs(Path(args.eval_answers), args.eval_per_set).items()):
        if name in have:
            continue
        started = time.perf_counter()
        s = _score(replay_on(replay_args, export, pairs, k=args.k), len(pairs))
        have[name] = {"accept_length": s.accept_length, "prompts": s.prompts, "rounds": s.rounds, "tokens": s.tokens,
                      "per_position_accept": s.per_position_accept, "seconds": round(time.perf_counter() - started, 1)}
        tmp = result.with_suffix(".tmp")
        tmp.write_text(json.dumps(have, indent=1))
        tmp.replace(result)
        print(args.which, name, json.dumps(have[name]), flush=True)


def child_args(args: argparse.Namespace) -> list[str]:
    """The options a child process needs, as given to this one."""
    keep = ("work", "w", "out", "samples", "batch_tokens", "lr", "epochs", "ttt", "draft_vocab", "max_length",
            "k", "eval_per_set", "eval_answers", "dh_save_every", "dh_max_steps")
    out = []
    for key in keep:
        value = getattr(args, key)
        if value is not None:
            out += [f"--{key.replace('_', '-')}", str(value)]
    return out
