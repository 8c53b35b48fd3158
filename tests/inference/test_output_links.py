"""The regeneration stage's outputs never follow a planted link: the journal, the status and run files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.atomic_files import UnsafePathError
from inference.errors import InferenceError
from inference.journal import DONE_FILE, ERRORS_FILE, Journal
from inference.status import write_json_atomic


@pytest.mark.parametrize("name", [DONE_FILE, ERRORS_FILE])
def test_a_link_at_a_journal_file_is_refused_and_nothing_outside_changes(tmp_path: Path, name: str) -> None:
    run, outside = tmp_path / "run", tmp_path / "outside.jsonl"
    run.mkdir()
    outside.write_text('{"id": "a"}\n{"id": "b", "torn')
    before = outside.read_bytes()
    (run / name).symlink_to(outside)
    journal = Journal(run)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        journal.open()
    assert isinstance(UnsafePathError("x"), InferenceError)
    assert outside.read_bytes() == before


def test_the_status_file_is_never_written_through_a_link(tmp_path: Path) -> None:
    run, outside = tmp_path / "run", tmp_path / "outside.json"
    run.mkdir()
    outside.write_text("keep")
    (run / "status.json").symlink_to(outside)
    for guess in (".status.json.1.tmp", "status.json.tmp"):
        (run / guess).symlink_to(outside)
    write_json_atomic(run / "status.json", {"state": "running"})
    assert outside.read_text() == "keep"
    assert not (run / "status.json").is_symlink()
    assert json.loads((run / "status.json").read_text()) == {"state": "running"}


def test_journal_rows_land_in_the_run_folder(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "run")
    journal.open()
    journal.write_done({"id": "1", "conversations": []})
    journal.write_failed({"id": "2", "error": "x"})
    journal.close()
    assert not (tmp_path / "run" / DONE_FILE).is_symlink()
    assert json.loads((tmp_path / "run" / DONE_FILE).read_text())["id"] == "1"
