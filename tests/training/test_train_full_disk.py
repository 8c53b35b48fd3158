"""`datahunt train` when the disk fills up: one line naming the cause, no traceback, no partial checkpoint left,
and the same command trains once there is room again.

The full disk is real, not injected: the trainer runs as its own process under a file-size limit
(`RLIMIT_FSIZE`), so the kernel refuses every write past it, as it does on a full disk (Python ignores the
SIGXFSZ that comes with it, and the write fails with EFBIG instead of ENOSPC).
"""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

FILE_LIMIT = 64 * 1024  # more than the log, config and vocabulary; far less than one checkpoint


def file_size_limit(limit: int) -> Callable[[], None]:
    """Return a `preexec_fn` that caps every file the child writes at `limit` bytes."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_full_disk_while_training_is_one_line_and_leaves_no_partial_checkpoint(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    datahunt = Path(sys.executable).parent / "datahunt"
    command = [str(datahunt), "train", "--data", str(regenerated_data["train"]), "--target", str(llama_dir),
               "--out", str(tmp_path), "--steps", "2", "--batch-size", "4", "--ttt-steps", "2",
               "--draft-vocab-size", "150", "--device", "cpu"]
    full = subprocess.run(command, capture_output=True, text=True, timeout=300, preexec_fn=file_size_limit(FILE_LIMIT))
    assert full.returncode == 1, full.stderr[-2000:]
    assert "Traceback" not in full.stderr and "unexpected pos" not in full.stderr, full.stderr[-2000:]
    errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].endswith("state.pt: File too large"), full.stderr[-2000:]
    assert "checkpoints/step_0000002" in errors[0]
    left = [p.name for p in tmp_path.rglob("*") if p.name.startswith(".tmp-") or p.name.endswith(".partial")]
    assert left == [] and not list(tmp_path.rglob("state.pt"))

    again = subprocess.run(command, capture_output=True, text=True, timeout=300)  # room again
    assert again.returncode == 0, again.stderr[-2000:]
    assert (tmp_path / "checkpoints" / "step_0000002" / "state.pt").stat().st_size > FILE_LIMIT
