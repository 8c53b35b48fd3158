"""`benchmarks/gpu_scaling.sh` at a call's time limit: `timeout` TERMs the script's whole process group while a
stage runs, and with RETURN_DRAFT=1 the newest checkpoint's draft must still go back in $OUT. It did not: the
TERM trap's `wait` returned the stage's non-zero status and `set -e` ended the script inside the trap, so two
device sessions' timed-out calls brought no draft home.

The stage here is a process that only waits to be killed (the trainer's own TERM handling is tested in
test_interrupt.py); the checkpoint is a real one from a short run, and the script's real export sends it back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training.config import make_config
from training.trainer import train

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_scaling.sh"


@pytest.mark.slow
def test_a_timed_out_curve_call_still_returns_the_newest_checkpoints_draft(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    run = work / "runs" / "regen_8_randomhead"
    train(make_config({"data": str(regenerated_data["train"]), "target": str(llama_dir), "out": str(run),
                       "draft_vocab_size": 150, "ttt_steps": 2, "batch_size": 4, "device": "cpu", "save_every": 2,
                       "max_steps": 4}))
    # The interpreter the script calls: the stage itself (`PY benchmarks/gpu_scaling.py curve …`) is a long wait
    # that a TERM ends; every other call (the export) is the real interpreter.
    python = tmp_path / "python"
    python.write_text(f'#!/usr/bin/env bash\nif [ "$1" = benchmarks/gpu_scaling.py ]; then exec sleep 300; fi\n'
                      f'exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    env = {**os.environ, "WORK": str(work), "PY": str(python), "OUT": str(out), "RETURN_DRAFT": "1",
           "OMP_NUM_THREADS": "2"}
    done = subprocess.run(["timeout", "8", "bash", str(SCRIPT), "curve", "--scales", "8"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 124, done.stderr[-2000:]  # the time limit ended it, as on the device
    parts = sorted(out.glob("draft_part*"))
    assert [p.name for p in parts] == ["draft_part00", "draft_part01", "draft_part02"], done.stderr[-2000:]
    assert (out / "draft_run.txt").read_text().strip() == "regen_8_randomhead"
    joined = tmp_path / "joined.safetensors"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    ours, theirs = load_file(str(joined)), load_file(str(run / "export" / "model.safetensors"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
