"""A full disk during `regen` is one line naming the cause, and the next run resumes: with the fault injected at
fsync (the operating-system boundary where a full disk surfaces), and with the kernel refusing the writes."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from regen_fake_server import FakeServer, write_samples
from typer.testing import CliRunner

from server.cli import app

FILE_LIMIT = 8 * 1024  # room for the run's small files and a few rows, not for sixty


def test_a_full_disk_is_one_line_and_the_run_resumes(tmp_path: Path, fake_server: FakeServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    write_samples(tmp_path / "in.jsonl", 5)
    run = tmp_path / "run"
    args = ["regen", "--input", str(tmp_path / "in.jsonl"), "--server", fake_server.url, "--out", str(run),
            "--force", "--no-progress"]
    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    failed = CliRunner().invoke(app, args)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert failed.exit_code == 1, failed.output
    assert "No space left on device" in failed.output and "Traceback" not in failed.output
    assert not list(run.rglob(".tmp-*"))
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert len((run / "regenerated.jsonl").read_text().splitlines()) == 5


def test_a_disk_that_really_fills_up_is_one_line_and_the_run_resumes(tmp_path: Path, fake_server: FakeServer) -> None:
    """The same with the kernel refusing the writes: `regen` runs as its own process under a file-size limit
    (`RLIMIT_FSIZE`), so every write past it fails as on a full disk (EFBIG; Python ignores SIGXFSZ)."""
    write_samples(tmp_path / "in.jsonl", 60)
    run = tmp_path / "run"
    datahunt = Path(sys.executable).parent / "datahunt"
    command = [str(datahunt), "regen", "--input", str(tmp_path / "in.jsonl"), "--server", fake_server.url,
               "--out", str(run), "--force", "--no-progress"]
    full = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT)))
    assert full.returncode == 1, full.stderr[-2000:]
    assert "Traceback" not in full.stderr, full.stderr[-2000:]
    errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "File too large" in errors[0] and "run the same command again" in errors[0]
    assert "Unclosed" not in full.stderr, full.stderr[-2000:]  # the HTTP session is closed on the way out
    assert not list(run.rglob(".tmp-*"))
    # The rows written before the disk filled are kept, and the line the disk cut is cut off whole at once:
    # no torn line outlives the failed write.
    text = (run / "regenerated.jsonl").read_text()
    assert text.endswith("\n")
    kept = text.split("\n")[:-1]
    assert 0 < len(kept) < 60 and all(json.loads(line)["conversations"] for line in kept)
    assert not (run / "finished.json").exists()
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    done = [json.loads(line)["id"] for line in (run / "regenerated.jsonl").read_text().splitlines()]
    assert len(done) == len(set(done)) == 60
