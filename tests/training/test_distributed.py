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
               "--batch-size", "2", "--ttt-steps", "2", "--draft-vocab-size", "64", "--device", "cpu"]
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
               "--device", "cpu"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 2 and len({s["steps"] for s in summaries}) == 1 and summaries[0]["steps"] > 1
