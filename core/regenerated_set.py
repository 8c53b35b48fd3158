"""The regenerated set's one reader: a regeneration run's journal, whether the run finished, its rows as models.

A run folder (`regen --out`) holds `run.json` (written first), the journal `regenerated.jsonl` (a row appended
as it finishes), `errors.jsonl`, `status.json`, and once every row has its final record its completion marker
`finished.json` (`RunFinished`: the journal's row count and stamp). The runner removes the marker before it
opens the journal, so a run that was killed, failed or is still running has none (`core/completion.py`).

`regenerated_file` is the one place that knows the layout and `read_regenerated` the one reader of the rows,
each a validated `RegeneratedSample`. A run folder, or its journal named by path, is read only through the
marker. A folder a release before markers finished (no lock file, `status.json` saying `finished`) is still
read, as is any JSONL file outside a run folder (`.gz` too: the tracked results are gzipped).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.completion import ArtifactError, FileStamp, HashingReader, IncompleteSetError, check_size
from core.folder_lock import LOCK_FILE
from core.jsonl import JsonlError, iter_jsonl_lines
from core.samples import RegeneratedSample

JOURNAL_FILE = "regenerated.jsonl"
ERRORS_FILE = "errors.jsonl"
RUN_FILE = "run.json"
STATUS_FILE = "status.json"
FINISHED_FILE = "finished.json"


class RunFinished(BaseModel):
    """`finished.json`: every row of the run has its final record; the journal as it was then."""

    model_config = ConfigDict(extra="ignore")

    rows: int = Field(ge=0)
    journal: FileStamp


class RunRecord(BaseModel):
    """What `run.json` says of a run that later stages read: the input it regenerated, the model that answered,
    its sampling and reasoning mode (the runner writes more: its servers, backend, concurrency)."""

    model_config = ConfigDict(extra="ignore")

    input: str | None = None
    model: str | None = None
    sampling: dict[str, object] | None = None
    reasoning: str | None = None


def read_run_record(folder: Path) -> RunRecord | None:
    """The `run.json` of the run in `folder`, validated; None when there is none or it is not one a run wrote."""
    path = Path(folder) / RUN_FILE
    try:
        return RunRecord.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


def is_run_folder(folder: Path) -> bool:
    """True when `folder` is a regeneration run's folder (it holds the `run.json` a run writes first)."""
    return (Path(folder) / RUN_FILE).is_file()


def _unfinished(folder: Path, why: str) -> IncompleteSetError:
    return IncompleteSetError(f"{folder} is not a finished regeneration run: {why}; run the same `datahunt regen` "
                              "command again to finish it (it resumes)")


def _legacy_state(folder: Path) -> str | None:
    """The `state` in the status file of a run folder, or None when it has none readable."""
    try:
        status = json.loads((folder / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    state = status.get("state") if isinstance(status, dict) else None
    return state if isinstance(state, str) else None


def run_finished(folder: Path) -> RunFinished | None:
    """Return the marker of the run in `folder` once its journal's size agrees with it, or None for a run a
    release before markers finished; raise IncompleteSetError for a run not finished (or changed since)."""
    folder = Path(folder)
    path = folder / FINISHED_FILE
    if path.is_file() and not path.is_symlink():
        try:
            marker = RunFinished.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            raise _unfinished(folder, f"its {FINISHED_FILE} is unreadable ({str(exc).splitlines()[0]})") from None
        check_size(folder / JOURNAL_FILE, marker.journal, folder)
        return marker
    state = _legacy_state(folder)
    if state == "finished" and not (folder / LOCK_FILE).exists():
        return None  # written before runs took a lock and left a marker: its status is the record it had
    shown = f"its status is {state!r}" if state else "it has no status"
    raise _unfinished(folder, f"it has no {FINISHED_FILE} ({shown}: the run was stopped, failed, or is still running)")


def regenerated_file(path: Path) -> Path:
    """Return the JSONL file of regenerated rows `path` names: a run folder's journal (its marker checked), a
    journal named by its path (checked the same way), or any other JSONL file as it is. Raise
    IncompleteSetError for an unfinished run, ArtifactError when there is no such file."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    file = path / JOURNAL_FILE if path.is_dir() else path
    if not file.is_file():
        raise ArtifactError(f"regenerated data {file} does not exist")
    if file.name == JOURNAL_FILE and is_run_folder(folder):
        run_finished(folder)
    return file


def _open(file: Path) -> BinaryIO:
    return cast(BinaryIO, gzip.open(file, "rb")) if file.name.endswith(".gz") else file.open("rb")


def read_regenerated(path: Path) -> Iterator[RegeneratedSample]:
    """Yield every row of the regenerated set `path` (see `regenerated_file`) as a validated `RegeneratedSample`.

    A finished run's journal is checked against its marker: its size before the first row, its row count and
    sha256 once it has been read (so a caller that collects the rows fails before using any of a changed file).
    Raises IncompleteSetError or ArtifactError (a line that is not JSON or not a regenerated row), naming it."""
    file = regenerated_file(path)
    folder = file.parent
    marker = run_finished(folder) if file.name == JOURNAL_FILE and is_run_folder(folder) else None
    count = 0
    with _open(file) as handle:
        reader = HashingReader(handle)
        try:
            for number, raw in iter_jsonl_lines(reader, str(file), objects=True):
                try:
                    yield RegeneratedSample.model_validate(raw)
                except ValidationError as exc:
                    first = exc.errors()[0]
                    loc = ".".join(str(part) for part in first["loc"])
                    raise ArtifactError(f"{file}:{number}: not a regenerated row ({loc}: {first['msg']})") from None
                count += 1
        except JsonlError as exc:
            raise ArtifactError(str(exc)) from None
        if marker is not None:
            reader.verify(file, marker.journal, folder)
            if count != marker.rows:
                raise IncompleteSetError(f"{folder} is not the run its {FINISHED_FILE} describes: {count} rows, "
                                         f"not {marker.rows}")


def finished_marker(folder: Path) -> bytes:
    """The bytes of the `finished.json` of the run in `folder` as its journal is now (rows counted and the file
    stamped in one pass), for the runner to write once every row has its final record."""
    file = Path(folder) / JOURNAL_FILE
    digest, size, rows = hashlib.sha256(), 0, 0
    with file.open("rb") as handle:
        for line in handle:
            digest.update(line)
            size += len(line)
            rows += bool(line.strip())
    marker = RunFinished(rows=rows, journal=FileStamp(bytes=size, sha256=digest.hexdigest()))
    return (marker.model_dump_json(indent=1) + "\n").encode()
