"""The training stage's writers: `core.atomic_files` bound to this stage's error class.

Every writer of the training stage (checkpoints, exports, logs) goes through here: never through a link, never
half, never at a guessed name (the rules are in `core/atomic_files.py`). Every run holds its output folder's
lock (`hold_folder`, see `core/folder_lock.py`), so a folder has one writer at a time.
"""

from __future__ import annotations

from typing import BinaryIO

from core.atomic_files import OutputFiles
from core.folder_lock import FolderLock
from training.errors import TrainingError


class OutputWriteError(TrainingError, OSError):
    """An output could not be written (a full disk, a read-only folder): the message names the file and why."""


class UnsafePathError(TrainingError, ValueError):
    """A file cannot be written there without following a link or leaving its folder (the message says why)."""


class WriteErrorKeeper:
    """A file for writers that hide the operating system's error: `torch.save` turns a write that failed for a
    full disk or a file-size limit into "unexpected pos N vs M". Writes pass through; the first OSError is kept
    in `error` (and raised on as usual), so the caller can name the real cause."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self.handle.flush()


class FolderBusyError(TrainingError, RuntimeError):
    """Another process holds the output folder's lock (`core.folder_lock`); the message names its pid."""


_FILES = OutputFiles(UnsafePathError)
folder = _FILES.folder
staged_file = _FILES.staged_file
write_file = _FILES.write_file
open_append = _FILES.open_append
remove_file = _FILES.remove_file
read_own = _FILES.read_own
remove_temporaries = _FILES.remove_temporaries
hold_folder = FolderLock(FolderBusyError).hold  # one writer per output folder
