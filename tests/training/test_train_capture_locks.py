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


def test_train_and_capture_refuse_a_run_that_did_not_finish(tmp_path: Path, llama_dir: Path,
                                                           regenerated_data: dict[str, Path]) -> None:
    """A regeneration run killed mid-way (its run file and journal, no completion marker) is not training data:
    both readers of it say so in one line, before any model loads; once finished it is read whole."""
    from typer.testing import CliRunner

    from core.regenerated_set import finished_marker
    from server.cli import app

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"input": "curated", "sampling": {}}))
    (run / "regenerated.jsonl").write_bytes(regenerated_data["heldout"].read_bytes())
    (run / "status.json").write_text(json.dumps({"state": "running"}))
    (run / LOCK_FILE).write_text("1\n")
    for args in (_train_args(run, llama_dir, tmp_path / "draft"),
                 ["capture", "--data", str(run), "--target", str(llama_dir), "--out", str(tmp_path / "cache"),
                  "--device", "cpu"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert "is not a finished regeneration run" in result.output.strip().splitlines()[-1]
    (run / "finished.json").write_bytes(finished_marker(run))
    result = CliRunner().invoke(app, ["capture", "--data", str(run), "--target", str(llama_dir), "--out",
                                      str(tmp_path / "cache"), "--device", "cpu"])
    assert result.exit_code == 0 and json.loads(result.output.strip().splitlines()[-1])["rows"] == 12
