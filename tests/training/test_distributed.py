"""`torchrun` data parallelism, on CPU with the gloo backend: two ranks split the rows and rank 0 exports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_two_ranks_split_the_rows_and_export_once(tmp_path: Path, llama_dir: Path,
                                                 regenerated_data: dict[str, Path]) -> None:
    datahunt = Path(sys.executable).parent / "datahunt"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--no-python", str(datahunt),
               "train", "--data", str(regenerated_data["heldout"]), "--target", str(llama_dir), "--out", str(tmp_path),
               "--batch-size", "2", "--ttt-steps", "2", "--draft-vocab-size", "64", "--device", "cpu", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 2
    assert {s["steps"] for s in summaries} == {3}  # 12 rows / 2 ranks / batch 2, not 6 as one process
    assert (tmp_path / "export" / "model.safetensors").is_file()
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_0000003"]


@pytest.mark.slow
def test_two_ranks_with_token_budgets_take_the_same_number_of_steps(tmp_path: Path, llama_dir: Path,
                                                                    regenerated_data: dict[str, Path]) -> None:
    """Token-budget batches pack each rank's shard differently; the ranks must still agree on every step."""
    datahunt = Path(sys.executable).parent / "datahunt"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--no-python", str(datahunt),
               "train", "--data", str(regenerated_data["train"]), "--target", str(llama_dir), "--out", str(tmp_path),
               "--batch-tokens", "300", "--epochs", "1", "--ttt-steps", "2", "--draft-vocab-size", "64",
               "--device", "cpu", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 2 and len({s["steps"] for s in summaries}) == 1 and summaries[0]["steps"] > 1


@pytest.mark.slow
def test_sigterm_to_torchrun_stops_every_rank_after_the_same_checkpointed_step(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    """torchrun passes SIGTERM to its workers; they agree on a log step to stop after, rank 0 checkpoints it,
    and both say the same step (a rank that stopped alone would leave the other hanging in its all-reduce)."""
    import re
    import signal
    import time

    import torch

    datahunt = Path(sys.executable).parent / "datahunt"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--no-python", str(datahunt),
               "train", "--data", str(regenerated_data["train"]), "--target", str(llama_dir), "--out", str(tmp_path),
               "--batch-size", "2", "--ttt-steps", "2", "--draft-vocab-size", "64", "--device", "cpu",
               "--steps", "5000", "--log-every", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    deadline = time.monotonic() + 180
    for line in process.stderr:
        if re.search(r"step \d+/5000", line) or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=180)
    stopped = re.findall(r"error: stopped by SIGTERM after step (\d+);", rest)
    assert len(stopped) == 2 and len(set(stopped)) == 1, rest[-3000:]
    step = int(stopped[0])
    assert step % 2 == 0 and step < 5000  # a log step: where the ranks compare their flags
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == [f"step_{step:07d}"]
    assert torch.load(tmp_path / "checkpoints" / f"step_{step:07d}" / "state.pt", weights_only=True)["step"] == step
