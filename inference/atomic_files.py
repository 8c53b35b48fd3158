"""The regeneration stage's writers: `core.atomic_files` bound to this stage's error class.

Every writer of the regeneration stage (journal, outputs, target folder) goes through here: never through a
link, never half, never at a guessed name (the rules are in `core/atomic_files.py`). Every run holds its
output folder's lock (`hold_folder`, see `core/folder_lock.py`), so a folder has one writer at a time.
"""

from __future__ import annotations

from core.atomic_files import OutputFiles
from core.folder_lock import FolderLock
from inference.errors import InferenceError


class UnsafePathError(InferenceError, ValueError):
    """A file cannot be written there without following a link or leaving its folder (the message says why)."""


class FolderBusyError(InferenceError, RuntimeError):
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
