"""Re-train the top (48K) SmolLM2 draft from the tracked regenerated set on one GPU, and carry it back in parts.

The 48K draft of docs/results/scaling.md was lost with its machine; its data is tracked
(`benchmarks/results/gpu_scaling/regenerated_smollm2_16k.jsonl.gz` + answers 2-3), so `gpu_scaling.sh setup`
lays it out as `$WORK/regen/regenerated.jsonl` and this script trains the same point under the same steps rule
(first 48,000 rows: every prompt's first answer before any second one; 4 epochs, 16,384-token batches,
lr 5e-4, 7 TTT steps, draft vocab 32,000, max length 1,024, lm_head from random weights), exporting for SGLang
and vLLM side by side. It is resumable: a time limit's TERM checkpoints the step in flight and the next call
continues. `pack` splits the SGLang export into parts under $OUT (the device returns files of at most 16 MiB);
`unpack` joins them here.

    python3 benchmarks/gpu_top_draft.py train --work /tmp/dh --out /tmp/dh/run48
    python3 benchmarks/gpu_top_draft.py pack --run /tmp/dh/run48 --dest "$OUT"
    python benchmarks/gpu_top_draft.py unpack --parts DIR --dest drafts/smollm2-48k
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
from itertools import islice
from pathlib import Path

PART_BYTES = 15 * 1024 * 1024


def train(args: argparse.Namespace) -> None:
    """Train (or resume) the 48K point; print the trainer's result."""
    from training.config import make_config
    from training.trainer import train as run_training

    work, run = Path(args.work), Path(args.out)
    run.mkdir(parents=True, exist_ok=True)
    data = run / "train_48k.jsonl"
    if not data.exists():
        with (work / "regen" / "regenerated.jsonl").open(encoding="utf-8") as src, data.open("w") as dst:
            dst.writelines(islice(src, args.samples))
    cfg = make_config({
        "data": data, "target": work / "target", "out": run, "max_length": 1024, "ttt_steps": 7,
        "draft_vocab_size": 32000, "head_init": "random", "lr": 5e-4, "epochs": 4, "batch_tokens": 16384,
        "device": args.device, "export_engine": "both", "save_every": 500, "log_every": 100,
        **({"max_steps": args.max_steps, "batch_tokens": 1024, "draft_vocab_size": 512} if args.max_steps else {}),
    })
    result = run_training(cfg)
    print(json.dumps({"steps": result.steps, "loss": result.loss, "tokens": result.tokens,
                      "tokens_per_s": result.tokens_per_s, "wall_s": result.wall_s,
                      "step_accuracies": result.step_accuracies, "export": str(result.export_dir)}))


def pack(args: argparse.Namespace) -> None:
    """Split the export's weights into parts beside its config and a manifest of sha256s."""
    export, dest = Path(args.run) / "export", Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    blob = (export / "model.safetensors").read_bytes()
    parts = [blob[i:i + PART_BYTES] for i in range(0, len(blob), PART_BYTES)]
    for i, part in enumerate(parts):
        (dest / f"draft_part{i}").write_bytes(part)
    shutil.copy(export / "config.json", dest / "draft_config.json")
    log = Path(args.run) / "train_log.jsonl"
    if log.exists():
        shutil.copy(log, dest / "draft_train_log.jsonl")
    manifest = {"parts": len(parts), "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    (dest / "draft_manifest.json").write_text(json.dumps(manifest))
    print(json.dumps(manifest))


def unpack(args: argparse.Namespace) -> None:
    """Join the parts into a draft folder and check the sha256."""
    parts, dest = Path(args.parts), Path(args.dest)
    manifest = json.loads((parts / "draft_manifest.json").read_text())
    blob = b"".join((parts / f"draft_part{i}").read_bytes() for i in range(manifest["parts"]))
    if hashlib.sha256(blob).hexdigest() != manifest["sha256"]:
        raise SystemExit("the joined draft does not match its sha256")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "model.safetensors").write_bytes(blob)
    shutil.copy(parts / "draft_config.json", dest / "config.json")
    print(f"wrote {dest} ({len(blob):,} bytes, sha256 ok)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["train", "pack", "unpack"])
    parser.add_argument("--work", default="/tmp/dh")
    parser.add_argument("--out", default="/tmp/dh/run48")
    parser.add_argument("--samples", type=int, default=48000)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max-steps", type=int, default=None, help="A CPU rehearsal's few steps (toy batches).")
    parser.add_argument("--run", default="/tmp/dh/run48")
    parser.add_argument("--dest", default=".")
    parser.add_argument("--parts", default=".")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    {"train": train, "pack": pack, "unpack": unpack}[args.command](args)


if __name__ == "__main__":
    main()
