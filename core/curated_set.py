"""The curated set's one reader: where its rows are, whether it was finished, and the rows as `CuratedSample`.

A curated folder (`curate --out`) holds `data/shard-NNNNN.parquet` (every row, the format of record), with
`--jsonl` also `samples.jsonl` (the same rows), `report.json` and `manifest.json`, and last of all its
completion marker `state.json` (`CuratedState`): the run's key, the outputs, and a `FileStamp` of each of
them, of the report and of the manifest. Curation removes the marker before it touches the first output and
writes it after the last, so a run killed at any rename leaves a folder without one (`core/completion.py`).

`curated_files` is the one place that knows this layout, and `read_curated` the one reader of its rows; a
folder that is a curated set (it holds `state.json` or a shard) is read only through its
marker, and so is a file of one given by its path. A file outside any set is read as it is.

Parquet is the curated set's format, so its reader needs pyarrow: this module alone in `core/` may import it
(inside `read_curated`, so importing `core` stays pydantic-only; tests/test_boundaries.py holds it to that).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from core.completion import (
    ArtifactError,
    FileStamp,
    HashingReader,
    IncompleteSetError,
    check_size,
)
from core.folder_lock import LOCK_FILE
from core.jsonl import JsonlError, iter_jsonl_lines
from core.samples import CuratedSample

STATE_FILE = "state.json"
REPORT_FILE = "report.json"
MANIFEST_FILE = "manifest.json"
SAMPLES_FILE = "samples.jsonl"
SHARDS = "data/shard-*.parquet"


class CuratedState(BaseModel):
    """`state.json`: the key of the run that wrote the set, its outputs (relative paths: the shards, then
    `samples.jsonl` when written) and the stamp of each file a reader trusts. `files` is None in a set written
    before stamps were kept; such a set is checked by its outputs' presence only."""

    model_config = ConfigDict(extra="ignore")

    final: str
    outputs: list[str]
    files: dict[str, FileStamp] | None = None


def is_curated_set(folder: Path) -> bool:
    """True when `folder` holds what only curation writes: its marker or a shard (a curate run renames its
    first shard in before any other output, so a torn set holds one too)."""
    folder = Path(folder)
    return folder.is_dir() and ((folder / STATE_FILE).exists() or any(folder.glob(SHARDS)))


def curated_folder_of(path: Path) -> Path | None:
    """Return the curated set `path` is or lies in (its shards lie in `data/`), or None when it is in none."""
    path = Path(path)
    if path.is_dir():
        return path if is_curated_set(path) else None
    for folder in (path.parent, path.parent.parent) if path.parent.name == "data" else (path.parent,):
        if is_curated_set(folder):
            return folder
    return None


def _unfinished(folder: Path, why: str) -> IncompleteSetError:
    return IncompleteSetError(f"{folder} is not a finished curated set: {why}; run `datahunt curate` on it again "
                              "(it reuses the work already done)")


def read_state(folder: Path) -> CuratedState:
    """Return the marker of the curated set in `folder` once its files agree with it (sizes, the shards there);
    raise IncompleteSetError naming what is wrong (no marker: a run was killed or is running)."""
    folder = Path(folder)
    path = folder / STATE_FILE
    if path.is_symlink() or not path.is_file():
        raise _unfinished(folder, f"it has no {STATE_FILE} (a curate run on it was killed, or is still running)")
    try:
        state = CuratedState.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise _unfinished(folder, f"its {STATE_FILE} is unreadable ({str(exc).splitlines()[0]})") from None
    if state.files is None and (folder / LOCK_FILE).exists():
        raise _unfinished(folder, f"its {STATE_FILE} stamps none of its files")  # every locking release stamps
    for name in state.outputs:
        stamp = (state.files or {}).get(name)
        if state.files is not None and stamp is None:
            raise _unfinished(folder, f"its {STATE_FILE} lists {name} without a stamp")
        if stamp is not None:
            check_size(folder / name, stamp, folder)
        elif not (folder / name).is_file():
            raise _unfinished(folder, f"{name} is missing though {STATE_FILE} lists it")
    for name, stamp in (state.files or {}).items():
        check_size(folder / name, stamp, folder)
    listed = {name for name in state.outputs if name.startswith("data/")}
    there = {p.relative_to(folder).as_posix() for p in folder.glob(SHARDS)}
    if there != listed:
        extra = sorted(there - listed) or sorted(listed - there)
        raise IncompleteSetError(f"{folder} is not the set its {STATE_FILE} describes: its shards differ "
                                 f"({', '.join(extra[:3])})")
    return state


def curated_files(path: Path) -> list[Path]:
    """Return the files holding the rows of the curated set `path` (its Parquet shards), or `[path]` for a file
    (checked against its set's marker when it lies in one). Raise IncompleteSetError for an unfinished or
    changed set, or a folder that is not a curated set."""
    path = Path(path)
    folder = curated_folder_of(path)
    if folder is None:
        if path.is_file():
            return [path]
        raise IncompleteSetError(f"{path} is not a curated set (no {STATE_FILE} or {SHARDS})")
    state = read_state(folder)
    if path.is_dir():
        return [folder / name for name in state.outputs if name.startswith("data/")]
    name = path.resolve().relative_to(folder.resolve()).as_posix()
    if name not in state.outputs:
        raise IncompleteSetError(f"{path} is not one of the outputs {folder / STATE_FILE} lists")
    return [path]


def read_curated(path: Path) -> Iterator[CuratedSample]:
    """Yield every row of the curated set (or curated file) `path`, in order, as a validated `CuratedSample`.

    The marker is checked first (`curated_files`), and each file's sha256 against its stamp before any of its
    rows is yielded. Raises IncompleteSetError (unfinished or changed) or ArtifactError (a row that is not a
    curated sample, a file that cannot be parsed), each naming the file."""
    folder = curated_folder_of(path)
    stamps = read_state(folder).files or {} if folder is not None else {}
    for file in curated_files(path):
        stamp = stamps.get(file.resolve().relative_to(folder.resolve()).as_posix()) if folder is not None else None
        for where, raw in _rows(file, stamp, folder or file.parent):
            try:
                yield CuratedSample.model_validate(raw)
            except ValidationError as exc:
                first = exc.errors()[0]
                loc = ".".join(str(part) for part in first["loc"])
                raise ArtifactError(f"{where}: not a curated row ({loc}: {first['msg']})") from None


def _rows(file: Path, stamp: FileStamp | None, folder: Path) -> list[tuple[str, object]]:
    """The raw rows of one file (all of it read, and its stamp checked, before any row is handed on)."""
    with file.open("rb") as handle:
        reader = HashingReader(handle)
        if file.suffix == ".parquet":
            import pyarrow as pa  # the set's format (see the module's docstring)
            import pyarrow.parquet as pq

            data = reader.read()
            reader.verify(file, stamp, folder)
            try:
                rows = pq.read_table(pa.BufferReader(data)).to_pylist()
            except Exception as exc:  # pyarrow raises several unrelated types for a bad file
                raise ArtifactError(f"{file}: not a readable Parquet file ({exc})") from None
            return [(f"{file}[{number}]", row) for number, row in enumerate(rows)]
        try:
            lines = [(f"{file}:{n}", row) for n, row in iter_jsonl_lines(reader, str(file), objects=True)]
        except JsonlError as exc:
            raise ArtifactError(str(exc)) from None
        reader.verify(file, stamp, folder)
        return lines


def write_state_text(final: str, outputs: list[str], files: dict[str, FileStamp]) -> bytes:
    """The bytes of a `state.json` (indented, key-sorted JSON), for curation's writers."""
    state = CuratedState(final=final, outputs=outputs, files=files)
    return (json.dumps(state.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode()
