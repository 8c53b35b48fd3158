"""One writer per folder, training's two writers: a second `train` on a run folder, or a second `capture` into a
cache folder, that a running one holds is refused at once in one line naming the holder's pid; the first then
finishes as if alone. A torn curated set is refused as training data (its rows are the datasets' answers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paused_writer import cleanup, refused_naming, resume, second_writer, start_paused

from core.folder_lock import LOCK_FILE


def _train_args(data: Path, target: Path, out: Path) -> list[str]:
    return ["train", "--data", str(data), "--target", str(target), "--out", str(out), "--steps", "2",
            "--batch-size", "4", "--draft-vocab-size", "150", "--ttt-steps", "2", "--device", "cpu"]


@pytest.mark.slow
def test_a_second_train_on_a_busy_run_folder_is_refused_naming_the_first(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    args = _train_args(regenerated_data["heldout"], llama_dir, tmp_path / "run")
    first = start_paused(args, tmp_path / "run" / LOCK_FILE)
    try:
        second = second_writer(args)
        assert refused_naming(second, first.pid), second.stderr
        assert not (tmp_path / "run" / "export").exists()
        code, _, err = resume(first)
    finally:
        cleanup(first)
    assert code == 0, err[-2000:]
    assert (tmp_path / "run" / "export" / "config.json").is_file()
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()
             if "step" in json.loads(line)]
    assert steps == sorted(set(steps))  # one writer's log: no step twice


@pytest.mark.slow
def test_a_second_capture_into_a_busy_cache_is_refused_naming_the_first(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    args = ["capture", "--data", str(regenerated_data["heldout"]), "--target", str(llama_dir), "--out",
            str(tmp_path / "cache"), "--device", "cpu"]
    first = start_paused(args, tmp_path / "cache" / LOCK_FILE)
    try:
        second = second_writer(args)
        assert refused_naming(second, first.pid), second.stderr
        code, out, err = resume(first)
    finally:
        cleanup(first)
    assert code == 0, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["rows"] == 12
    assert json.loads((tmp_path / "cache" / "manifest.json").read_text())["complete"] is True
