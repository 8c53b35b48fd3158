"""The journal's exactly-once rules: torn last lines, resume sets, retry of failed rows, no double writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.journal import DONE_FILE, ERRORS_FILE, Journal, JournalError


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


def test_torn_last_line_is_cut_off_and_its_row_runs_again(tmp_path: Path) -> None:
    (tmp_path / DONE_FILE).write_text('{"id": "a", "conversations": []}\n{"id": "b", "conv')
    journal = Journal(tmp_path)
    journal.open()
    assert journal.done_ids == {"a"} and not journal.finished("b")
    journal.write_done({"id": "b", "conversations": []})
    journal.close()
    assert _ids(tmp_path / DONE_FILE) == ["a", "b"]


def test_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    (tmp_path / DONE_FILE).write_text('{"id": "a"}\ngarbage\n{"id": "c"}\n')
    with pytest.raises(JournalError, match=":2: corrupt"):
        Journal(tmp_path).open()


def test_a_row_is_written_once(tmp_path: Path) -> None:
    journal = Journal(tmp_path, fsync_interval_s=0)
    journal.open()
    journal.write_done({"id": "a"})
    with pytest.raises(JournalError):
        journal.write_done({"id": "a"})
    with pytest.raises(JournalError):
        journal.write_failed({"id": "a", "error": "x"})
    journal.close()


def test_failed_rows_stay_failed_unless_retried_and_never_end_in_both_files(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.open()
    journal.write_failed({"id": "f1", "error": "HTTP 400"})
    journal.write_failed({"id": "f2", "error": "HTTP 400"})
    journal.write_done({"id": "ok"})
    journal.close()

    plain = Journal(tmp_path)
    plain.open()
    assert plain.finished("f1") and plain.finished("ok")
    plain.close()

    retry = Journal(tmp_path)
    retry.open(retry_failed=True)
    assert not retry.finished("f1") and not retry.finished("f2")
    assert _ids(tmp_path / ERRORS_FILE) == []
    retry.write_done({"id": "f1"})
    retry.write_failed({"id": "f2", "error": "again"})
    retry.close()
    assert sorted(_ids(tmp_path / DONE_FILE)) == ["f1", "ok"]
    assert _ids(tmp_path / ERRORS_FILE) == ["f2"]


def test_an_id_in_both_files_keeps_the_success(tmp_path: Path) -> None:
    (tmp_path / DONE_FILE).write_text('{"id": "a"}\n')
    (tmp_path / ERRORS_FILE).write_text('{"id": "a", "error": "x"}\n{"id": "b", "error": "y"}\n')
    journal = Journal(tmp_path)
    journal.open()
    journal.close()
    assert _ids(tmp_path / ERRORS_FILE) == ["b"]
    assert journal.failed_ids == {"b"}


def test_resume_reads_earlier_completion_lengths(tmp_path: Path) -> None:
    lines = [
        {"id": "a", "meta": {"regenerated": True, "completion_tokens": 120}},
        {"id": "b", "meta": {"regenerated": False}},
        {"id": "c", "meta": {"regenerated": True, "completion_tokens": 30}},
    ]
    (tmp_path / DONE_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    journal = Journal(tmp_path)
    journal.open()
    journal.close()
    assert journal.done_lengths == [120, 30] and journal.done_ids == {"a", "b", "c"}
