"""A regeneration run folder has one writer and a completion marker: a second `regen` on a folder a running one
holds is refused at once naming its pid; a SIGKILLed run's folder is taken by the next run at once; and
`train`, `publish` and `curve` refuse a run that did not finish (killed, stopped, resumed and killed again)
instead of consuming its rows, while a finished run reads back whole."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from paused_writer import cleanup, refused_naming, resume, second_writer, start_paused
from regen_fake_server import FakeServer, write_samples

from core.completion import IncompleteSetError
from core.folder_lock import LOCK_FILE
from core.regenerated_set import FINISHED_FILE, read_regenerated
from curation.publish import PublishError, build_folder
from training.curve.plan import CurveError, regenerated_file
from training.data import DataError, load_conversations


def _args(tmp_path: Path, url: str, rows: str = "in.jsonl") -> list[str]:
    return ["regen", "--input", str(tmp_path / rows), "--server", url, "--out", str(tmp_path / "run"),
            "--concurrency", "4"]


def _ids(run: Path) -> list[str]:
    return [json.loads(line)["id"] for line in (run / "regenerated.jsonl").read_text().splitlines()]


def _refused_by_every_reader(run: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a finished regeneration run"):
        load_conversations(run)
    with pytest.raises(DataError, match="not a finished regeneration run"):
        load_conversations(run / "regenerated.jsonl")  # the journal named by its path is the run's too
    with pytest.raises(CurveError, match="not a finished regeneration run"):
        regenerated_file(run)
    with pytest.raises(PublishError, match="not a finished regeneration run"):
        build_folder(run, tmp_path / "hub", repo_id="me/x", version="0")


@pytest.mark.slow
def test_a_second_regen_on_a_busy_run_folder_is_refused_and_rows_are_written_once(tmp_path: Path) -> None:
    rows = write_samples(tmp_path / "in.jsonl", 40)
    server = FakeServer(delay_s=0.01).start()
    try:
        first = start_paused(_args(tmp_path, server.url), tmp_path / "run" / LOCK_FILE)
        try:
            second = second_writer(_args(tmp_path, server.url))
            assert refused_naming(second, first.pid), second.stderr
            code, _, err = resume(first)
        finally:
            cleanup(first)
    finally:
        server.stop()
    assert code == 0, err
    done = _ids(tmp_path / "run")
    assert len(done) == len(set(done)) == len(rows)  # each row once: the second writer appended nothing
    assert len(list(read_regenerated(tmp_path / "run"))) == len(rows)


@pytest.mark.slow
def test_a_sigkilled_regen_leaves_its_folder_to_the_next_run_at_once_and_unfinished_to_readers(tmp_path: Path) -> None:
    rows = write_samples(tmp_path / "in.jsonl", 60)
    server = FakeServer(delay_s=0.02).start()
    try:
        first = start_paused(_args(tmp_path, server.url), tmp_path / "run" / LOCK_FILE)
        try:
            os.killpg(first.pid, signal.SIGCONT)
            while not (tmp_path / "run" / "regenerated.jsonl").is_file() or not _ids(tmp_path / "run"):
                assert first.poll() is None
            os.killpg(first.pid, signal.SIGKILL)  # mid-run: some rows done, the lock its process's
            first.wait()
        finally:
            cleanup(first)
        assert not (tmp_path / "run" / FINISHED_FILE).exists()
        _refused_by_every_reader(tmp_path / "run", tmp_path)
        again = second_writer(_args(tmp_path, server.url))  # no wait, no stale lock to remove by hand
    finally:
        server.stop()
    assert again.returncode == 0, again.stderr
    done = _ids(tmp_path / "run")
    assert len(done) == len(set(done)) == len(rows)
    assert [row_id for row_id, _ in load_conversations(tmp_path / "run")] == done


@pytest.mark.slow
def test_a_finished_run_resumed_with_more_rows_and_killed_is_unfinished_again(tmp_path: Path) -> None:
    write_samples(tmp_path / "in.jsonl", 10)
    write_samples(tmp_path / "more.jsonl", 60)  # the same first ten rows, and fifty more
    server = FakeServer(delay_s=0.02).start()
    try:
        assert second_writer(_args(tmp_path, server.url)).returncode == 0
        assert len(load_conversations(tmp_path / "run")) == 10  # finished: read whole
        first = start_paused(_args(tmp_path, server.url, "more.jsonl"), tmp_path / "run" / LOCK_FILE)
        try:
            os.killpg(first.pid, signal.SIGCONT)
            while len(_ids(tmp_path / "run")) <= 10:
                assert first.poll() is None
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        finally:
            cleanup(first)
    finally:
        server.stop()
    _refused_by_every_reader(tmp_path / "run", tmp_path)


def test_a_journal_changed_after_its_run_finished_is_refused(tmp_path: Path, fake_server: FakeServer) -> None:
    write_samples(tmp_path / "in.jsonl", 5)
    assert second_writer(_args(tmp_path, fake_server.url)).returncode == 0
    journal = tmp_path / "run" / "regenerated.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines + lines[:1]))  # a row twice: the size no longer matches the marker
    with pytest.raises(IncompleteSetError, match="not the set its completion marker describes"):
        list(read_regenerated(tmp_path / "run"))
    journal.write_text("".join(lines).replace("row-1", "row-X", 1))  # same size, other bytes
    with pytest.raises(IncompleteSetError, match="sha256 differs"):
        list(read_regenerated(tmp_path / "run"))


def test_a_garbage_run_file_is_one_error_line(tmp_path: Path, fake_server: FakeServer) -> None:
    write_samples(tmp_path / "in.jsonl", 3)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_bytes(b"\x00garbage{")
    done = second_writer(_args(tmp_path, fake_server.url))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ") and "run.json is not a run file" in done.stderr
