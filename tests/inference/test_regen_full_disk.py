"""A full disk during `regen` is one line naming the cause, and the next run resumes (fault injected at fsync,
the operating-system boundary where a full disk surfaces)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from regen_fake_server import FakeServer, write_samples
from typer.testing import CliRunner

from server.cli import app


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
