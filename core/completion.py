"""Completion markers: how a reader knows that a stage's output folder was finished, and still holds what was.

A stage writes its outputs, then last of all a marker naming each output with its size and sha256 (a
`FileStamp`); it removes the marker before it touches the first output of a new run. A folder without its
marker is unfinished (a run was killed, or is running), and a folder whose files disagree with their stamps
was changed since; either way a reader refuses it in one line (`IncompleteSetError`) instead of consuming a
torn set. The curated set's marker is `state.json` (`core/curated_set.py`), a regeneration run's
`finished.json` (`core/regenerated_set.py`), a hidden-state cache's the `complete` flag of its manifest.

Sizes are checked before any row is read; a sha256 is checked as the file is read (`HashingReader`), so a
file is read once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict, Field

_BLOCK = 8 << 20


class ArtifactError(ValueError):
    """A stage's output that cannot be read as what its writer wrote: unfinished, changed, or a row that is not
    its model (the message names the file and the row). Each stage's caller re-raises it as its own error."""


class IncompleteSetError(ArtifactError):
    """A stage's output folder whose completion marker is missing, unreadable or disagrees with its files."""


class FileStamp(BaseModel):
    """One finished output: its size and sha256 when its writer finished it."""

    model_config = ConfigDict(extra="forbid")

    bytes: int = Field(ge=0)
    sha256: str


def stamp_file(path: Path) -> FileStamp:
    """Return the stamp of the file at `path` as it is now (streamed: any size)."""
    digest = hashlib.sha256()
    size = 0
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
            size += len(block)
    return FileStamp(bytes=size, sha256=digest.hexdigest())


def check_size(path: Path, stamp: FileStamp, folder: Path) -> None:
    """Raise IncompleteSetError when `path` is missing or its size is not the stamp's."""
    try:
        size = Path(path).stat().st_size
    except FileNotFoundError:
        raise IncompleteSetError(f"{folder} is not a finished set: {path.name} is missing though its completion "
                                 "marker names it") from None
    if size != stamp.bytes:
        raise IncompleteSetError(f"{folder} is not the set its completion marker describes: {path} holds {size} "
                                 f"bytes, not the {stamp.bytes} it was finished with")


class HashingReader:
    """A binary file read whole or line by line while its sha256 is taken; `verify` compares it with a stamp
    once the file has been read to its end."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data

    def __iter__(self) -> HashingReader:
        return self

    def __next__(self) -> bytes:
        line = self.handle.readline()
        if not line:
            raise StopIteration
        self.digest.update(line)
        return line

    def verify(self, path: Path, stamp: FileStamp | None, folder: Path) -> None:
        """Raise IncompleteSetError when the bytes read were not the stamped ones (no stamp: nothing to check)."""
        self.digest.update(self.handle.read())  # anything left unread still counts
        if stamp is not None and self.digest.hexdigest() != stamp.sha256:
            raise IncompleteSetError(f"{folder} is not the set its completion marker describes: {path} was changed "
                                     "after its writer finished it (its sha256 differs)")
