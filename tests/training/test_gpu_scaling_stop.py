"""`benchmarks/gpu_scaling.sh` at a call's time limit: `timeout` TERMs the script, then its whole process group,
while a stage runs, and with RETURN_DRAFT=1 the newest checkpoint's draft must still go back in $OUT.

Two ways it failed. The TERM trap's `wait` returned the stage's non-zero status and `set -e` ended the script inside
the trap, so two device sessions' timed-out calls brought no draft home. And `timeout` sends its signal twice,
first to the script and then to the group: when the second copy is late (a loaded machine; CI met it), it lands on
the export that returns the draft, which died silently and returned nothing.

The stage here is a process that only waits to be killed (the trainer's own TERM handling is tested in
test_interrupt.py); the checkpoint is a real one from a short run, and the script's real export sends it back. The
two copies of the signal are sent by the test, the second exactly while the export runs, so the order that CI met
by chance happens every time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training.config import make_config
from training.trainer import train

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_scaling.sh"


def wait_for(path: Path, proc: subprocess.Popen[str], limit_s: float = 120.0) -> None:
    """Until `path` exists; fails with the script's output if it ends first or the limit passes."""
    start = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the script ended (rc {proc.returncode}) before {path.name}: {err[-2000:]}")
        if time.monotonic() - start > limit_s:
            proc.kill()
            pytest.fail(f"no {path.name} after {limit_s:.0f} s")
        time.sleep(0.05)


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
    # that a TERM ends; the export (`PY -c …`) is the real interpreter, which marks its start and holds on a moment
    # so that the late copy of the signal lands on it.
    staged, exporting = tmp_path / "stage_started", tmp_path / "export_started"
    python = tmp_path / "python"
    python.write_text("#!/usr/bin/env bash\n"
                      f'if [ "$1" = benchmarks/gpu_scaling.py ]; then touch "{staged}"; exec sleep 300; fi\n'
                      f'if [ "$1" = -c ]; then touch "{exporting}"; sleep 1; fi\n'
                      f'exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    env = {**os.environ, "WORK": str(work), "PY": str(python), "OUT": str(out), "RETURN_DRAFT": "1",
           "OMP_NUM_THREADS": "2"}
    # A group of its own, as `timeout` makes one.
    proc = subprocess.Popen(["bash", str(SCRIPT), "curve", "--scales", "8"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    wait_for(staged, proc)
    os.kill(proc.pid, signal.SIGTERM)  # timeout's first copy: the script
    wait_for(exporting, proc)
    os.killpg(proc.pid, signal.SIGTERM)  # its second, late: the whole group, the export included
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]  # the stage's status, as the time limit left it
    parts = sorted(out.glob("draft_part*"))
    assert [p.name for p in parts] == ["draft_part00", "draft_part01", "draft_part02"], err[-2000:]
    assert (out / "draft_run.txt").read_text().strip() == "regen_8_randomhead"
    joined = tmp_path / "joined.safetensors"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    ours, theirs = load_file(str(joined)), load_file(str(run / "export" / "model.safetensors"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
