"""The run's append-only journal: `regenerated.jsonl` and `errors.jsonl` are written as rows finish.

Rules that make a run exactly-once across crashes:
- A row's final record is one complete JSON line, appended and flushed the moment the row finishes, in
  whatever order rows finish. An id in `regenerated.jsonl` is finished for good; an id in `errors.jsonl`
  finally failed (retries spent, or a 4xx/malformed answer).
- On resume both files are read; an incomplete last line (the process died mid-write) is cut off, so the
  row it belonged to runs again. Every complete line's id is skipped.
- `retry_failed` first rewrites `errors.jsonl` without the failed rows (atomically, via a temp file and
  rename), then runs them again: a row is never in both files. Should both files still name an id (edited
  by hand), the success wins and the error line is dropped.
- A line is written whole or not at all: a write the disk refuses part-way (full, or a file-size limit) is
  cut back to the last complete line before the error goes on, so no torn line outlives a failed write.
- Lines are flushed to the OS on every write (a SIGKILL loses nothing written); `fsync` runs at most every
  `fsync_interval_s` seconds (0 = every line) and at close, bounding what a power loss can take.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from core.regen_records import FailedRecord, RegeneratedRecord
from core.regenerated_set import ERRORS_FILE, JOURNAL_FILE
from inference.atomic_files import UnsafePathError, open_append, staged_file
from inference.errors import InferenceError
from inference.quality import QualityCounts, category_of, record_flags

logger = logging.getLogger(__name__)

DONE_FILE = JOURNAL_FILE  # the layout is the reader's (core.regenerated_set)


class JournalError(InferenceError, RuntimeError):
    """A journal file has a corrupt line that is not the torn last one; the message names it."""


def _read_ids(
    path: Path, lengths: list[int] | None = None, quality: dict[str, QualityCounts] | None = None
) -> list[str]:
    """Return the ids of the complete lines of `path`, cutting off a torn last line in place.

    The file is streamed (a day's run can hold gigabytes). When `lengths` is given, the completion tokens of
    every regenerated row are appended to it, so a resumed run's ETA starts from what earlier runs saw; when
    `quality` is given, every regenerated row is counted in it by category (cut at the limit, repetitive).
    """
    if path.is_symlink():
        raise UnsafePathError(f"{path} is a symbolic link; a run's journal is never read or written through links")
    if not path.exists():
        return []
    ids: list[str] = []
    good_end = 0
    torn = False
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith(b"\n"):
                torn = True
                break
            good_end += len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                ids.append(str(record["id"]))
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
                raise JournalError(f"{path}:{number}: corrupt journal line (not a JSON object with an id)") from None
            meta = record.get("meta") if isinstance(record, dict) else None
            if lengths is not None and isinstance(meta, dict) and meta.get("regenerated"):
                lengths.append(int(meta.get("completion_tokens") or 0))
            if quality is not None and isinstance(meta, dict) and meta.get("regenerated"):
                quality.setdefault(category_of(record), QualityCounts()).add(*record_flags(record))
    if torn:
        logger.warning("%s: cutting off an incomplete last line left by a crash", path)
        with path.open("r+b") as handle:
            handle.truncate(good_end)
    return ids


def _rewrite_without(path: Path, drop: set[str]) -> None:
    """Atomically rewrite `path` keeping only the lines whose id is not in `drop`."""
    with path.open("rb") as src, staged_file(path) as dst:
        for line in src:
            if line.strip() and str(json.loads(line)["id"]) not in drop:
                dst.write(line)


@dataclass
class Journal:
    """The two output files of a run directory, opened for append."""

    run_dir: Path
    fsync_interval_s: float = 1.0
    done_ids: set[str] = field(default_factory=set)
    failed_ids: set[str] = field(default_factory=set)
    done_lengths: list[int] = field(default_factory=list)
    done_quality: dict[str, QualityCounts] = field(default_factory=dict)
    _handles: dict[str, IO[bytes]] = field(default_factory=dict)
    _ends: dict[str, int] = field(default_factory=dict)  # each file's size after its last complete line
    _last_fsync: float = 0.0

    @property
    def done_path(self) -> Path:
        return self.run_dir / DONE_FILE

    @property
    def errors_path(self) -> Path:
        return self.run_dir / ERRORS_FILE

    def open(self, *, retry_failed: bool = False) -> None:
        """Read what earlier attempts finished and open both files for append."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.done_lengths, self.done_quality = [], {}
        done = _read_ids(self.done_path, self.done_lengths, self.done_quality)
        failed = _read_ids(self.errors_path)
        if len(done) != len(set(done)):
            logger.warning("%s names %d ids twice", self.done_path, len(done) - len(set(done)))
        self.done_ids = set(done)
        both = self.done_ids & set(failed)
        drop = both | (set(failed) if retry_failed else set())
        if drop:
            _rewrite_without(self.errors_path, drop)
        self.failed_ids = set(failed) - drop
        for name, path in ((DONE_FILE, self.done_path), (ERRORS_FILE, self.errors_path)):
            self._handles[name] = open_append(path)  # a link planted at the name is refused, never followed
            self._ends[name] = os.fstat(self._handles[name].fileno()).st_size
        self._last_fsync = time.monotonic()

    def finished(self, row_id: str) -> bool:
        """True when `row_id` already has its final record."""
        return row_id in self.done_ids or row_id in self.failed_ids

    def _append(self, name: str, record: RegeneratedRecord | FailedRecord) -> None:
        fd = self._handles[name].fileno()
        data = json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
        try:  # written straight to the file (no buffer left to flush later), all of it or none
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:  # a full disk or a file-size limit cut the line: it is cut off again, whole
            os.ftruncate(fd, self._ends[name])
            raise
        self._ends[name] += len(data)
        now = time.monotonic()
        if now - self._last_fsync >= self.fsync_interval_s:
            self.sync()
            self._last_fsync = now

    def write_done(self, record: RegeneratedRecord) -> None:
        """Append a row's regenerated record; each id is written once."""
        row_id = str(record["id"])
        if row_id in self.done_ids:
            raise JournalError(f"row {row_id!r} was already written to {DONE_FILE}")
        self._append(DONE_FILE, record)
        self.done_ids.add(row_id)

    def write_failed(self, record: FailedRecord) -> None:
        """Append a row's final error record; each id is written once."""
        row_id = str(record["id"])
        if row_id in self.failed_ids or row_id in self.done_ids:
            raise JournalError(f"row {row_id!r} already has a final record")
        self._append(ERRORS_FILE, record)
        self.failed_ids.add(row_id)

    def sync(self) -> None:
        """fsync both files."""
        for handle in self._handles.values():
            os.fsync(handle.fileno())

    def close(self) -> None:
        """fsync and close both files (closed even when the fsync fails, e.g. on a full disk)."""
        try:
            if self._handles:
                self.sync()
        finally:
            for handle in self._handles.values():
                handle.close()
            self._handles.clear()
