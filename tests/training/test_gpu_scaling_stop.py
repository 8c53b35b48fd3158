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


def trained_run(work: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> Path:
    """A real run's folder with checkpoints (4 steps, one every 2)."""
    run = work / "runs" / "regen_8_randomhead"
    train(make_config({"data": str(regenerated_data["train"]), "target": str(llama_dir), "out": str(run),
                       "draft_vocab_size": 150, "ttt_steps": 2, "batch_size": 4, "device": "cpu", "save_every": 2,
                       "max_steps": 4}))
    return run


def fake_interpreter(tmp_path: Path, stage: str) -> Path:
    """The interpreter the script calls: the stage itself (`PY benchmarks/gpu_scaling.py curve …`) runs `stage`
    (shell) after marking its start; the export (`PY -c …`) is the real interpreter, which marks its start and
    holds on a moment so that a late copy of a signal lands on it."""
    python = tmp_path / "python"
    python.write_text("#!/usr/bin/env bash\n"
                      'if [ "$1" = benchmarks/gpu_scaling.py ]; then '
                      f'touch "{tmp_path / "stage_started"}"; {stage}; fi\n'
                      f'if [ "$1" = -c ]; then touch "{tmp_path / "export_started"}"; sleep 1; fi\n'
                      f'exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python


def start_curve(tmp_path: Path, work: Path, out: Path, **extra: str) -> subprocess.Popen[str]:
    """`gpu_scaling.sh curve` with RETURN_DRAFT=1, in a process group of its own, as `timeout` makes one."""
    env = {**os.environ, "WORK": str(work), "PY": str(tmp_path / "python"), "OUT": str(out), "RETURN_DRAFT": "1",
           "OMP_NUM_THREADS": "2", **extra}
    return subprocess.Popen(["bash", str(SCRIPT), "curve", "--scales", "8"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def assert_draft_returned(tmp_path: Path, out: Path, run: Path, err: str) -> None:
    """The three parts in $OUT join to the export of the run's newest checkpoint."""
    parts = sorted(out.glob("draft_part*"))
    assert [p.name for p in parts] == ["draft_part00", "draft_part01", "draft_part02"], err[-2000:]
    assert (out / "draft_run.txt").read_text().strip() == run.name
    joined = tmp_path / "joined.safetensors"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    ours, theirs = load_file(str(joined)), load_file(str(run / "export" / "model.safetensors"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.mark.slow
def test_a_timed_out_curve_call_still_returns_the_newest_checkpoints_draft(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    run = trained_run(work, llama_dir, regenerated_data)
    fake_interpreter(tmp_path, "exec sleep 300")
    proc = start_curve(tmp_path, work, out)
    wait_for(tmp_path / "stage_started", proc)
    os.kill(proc.pid, signal.SIGTERM)  # timeout's first copy: the script
    wait_for(tmp_path / "export_started", proc)
    os.killpg(proc.pid, signal.SIGTERM)  # its second, late: the whole group, the export included
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]  # the stage's status, as the time limit left it
    assert_draft_returned(tmp_path, out, run, err)


@pytest.mark.slow
def test_stop_at_ends_the_stage_itself_before_the_calls_end_and_the_draft_still_goes_back(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    # No `timeout` and no signal from outside: STOP_AT less its reserve is now, so the script TERMs the stage.
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    run = trained_run(work, llama_dir, regenerated_data)
    fake_interpreter(tmp_path, "exec sleep 300")
    proc = start_curve(tmp_path, work, out, STOP_AT=str(int(time.time()) + 2), STOP_RESERVE_S="0")
    _, err = proc.communicate(timeout=240)  # the stage alone would sleep 300 s
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "the stage is stopped in" in err
    assert_draft_returned(tmp_path, out, run, err)


@pytest.mark.slow
def test_a_stage_that_ends_before_stop_at_is_not_held_by_the_watcher(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    # The stage ends at once with STOP_AT an hour away: the script and its output end with it, the draft returned.
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    run = trained_run(work, llama_dir, regenerated_data)
    fake_interpreter(tmp_path, "exit 0")
    proc = start_curve(tmp_path, work, out, STOP_AT=str(int(time.time()) + 3600))
    _, err = proc.communicate(timeout=240)  # a watcher holding stdout open would keep this waiting an hour
    assert proc.returncode == 0, err[-2000:]
    assert_draft_returned(tmp_path, out, run, err)
