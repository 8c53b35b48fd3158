"""Checkpoints and exports commit whole: a full disk (injected at fsync, where the operating system reports
it) is one OutputWriteError, leaves no temporary or partial file, and never a half-new result; a link planted
at a name under the run folder is never written through."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.test_draft_export import LAYERS, _draft
from training.atomic_files import OutputWriteError, UnsafePathError
from training.checkpoints import save_checkpoint
from training.config import make_config
from training.errors import TrainingError
from training.export import export_draft


def _full(fd: int) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _setup(tmp_path: Path) -> tuple[Any, Any, Any, Any]:
    cfg = make_config({"data": "d.jsonl", "target": ".", "out": str(tmp_path / "out")})
    draft = _draft()
    optimizer = torch.optim.AdamW(draft.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return cfg, draft, optimizer, scheduler


def test_a_full_disk_while_checkpointing_is_one_error_and_leaves_no_partial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, draft, optimizer, scheduler = _setup(tmp_path)
    monkeypatch.setattr(os, "fsync", _full)
    with pytest.raises(OutputWriteError, match="No space left on device") as caught:
        save_checkpoint(cfg, draft, optimizer, scheduler, 3)
    assert isinstance(caught.value, TrainingError) and "\n" not in str(caught.value)
    folder = cfg.out / "checkpoints" / "step_0000003"
    assert not (folder / "state.pt").exists()
    assert [p.name for p in folder.iterdir() if p.name.startswith(".tmp-") or "partial" in p.name] == []
    monkeypatch.undo()
    written = save_checkpoint(cfg, draft, optimizer, scheduler, 3)
    assert torch.load(written / "state.pt", weights_only=True)["step"] == 3


def test_a_link_planted_in_the_run_folder_is_never_written_through(tmp_path: Path) -> None:
    cfg, draft, optimizer, scheduler = _setup(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cfg.out / "checkpoints").mkdir(parents=True)
    (cfg.out / "checkpoints" / "step_0000001").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(TrainingError):
        save_checkpoint(cfg, draft, optimizer, scheduler, 1)
    assert list(elsewhere.iterdir()) == []
    outside = tmp_path / "outside"
    outside.write_text("keep")
    folder = cfg.out / "checkpoints" / "step_0000002"
    folder.mkdir()
    (folder / "state.pt").symlink_to(outside)
    (folder / "state.pt.partial").symlink_to(outside)
    save_checkpoint(cfg, draft, optimizer, scheduler, 2)
    assert outside.read_text() == "keep" and not (folder / "state.pt").is_symlink()
    assert isinstance(UnsafePathError("x"), TrainingError)


def test_a_failed_export_leaves_no_config_beside_half_new_weights(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "export"
    export_draft(_draft(), LAYERS, folder)
    assert (folder / "config.json").is_file()
    monkeypatch.setattr(os, "fsync", _full)
    with pytest.raises(OutputWriteError, match="No space left on device"):
        export_draft(_draft(), LAYERS, folder)
    assert not (folder / "config.json").exists()  # readers require it: the folder is not taken as an export
    assert [p.name for p in folder.iterdir() if p.name.startswith(".tmp-")] == []
