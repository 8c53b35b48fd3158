"""One writer per stage output folder: an OS file lock held for the whole run, released by the kernel.

Every stage that writes a folder (`curate --out`, `regen --out`, `train --out`, `capture --out`, `publish
--out`) holds an exclusive `flock` on a lock file in it (`LOCK_FILE`) from before its first write to its end.
A second process pointed at the same folder is refused at once, naming the holder's pid (written into the
lock file once the lock is taken), instead of writing every row a second time beside the first. The lock is
the kernel's: it belongs to the open file, so a process that dies in any way (SIGKILL included) releases it
with its descriptors, and the folder is usable at once; no stale lock is ever left to clean by hand. The file
itself stays (removing it would let a third process lock a new file while the second still holds the old one).
`flock` is advisory: it binds datahunt's own writers, which all take it, not other programs.

Each stage binds `FolderLock` to its own error class (in its `atomic_files.py`), so a refusal is that stage's
error and ends as one `error:` line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = ".datahunt.lock"
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_HELD: set[int] = set()  # this process's lock descriptors
RETRY_S = 0.5  # how long a refusal waits for a holder that has the lock but not yet its pid in the file


def _close_inherited() -> None:
    """In a forked child (a curation engine's worker), close the parent's lock descriptors: the lock stays the
    parent's alone, so it ends with the parent even while a killed parent's workers are still exiting."""
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited)


def lock_holder(lock_file: Path) -> int | None:
    """Return the pid written in `lock_file` (the last process that took it), or None when it names none."""
    try:
        text = Path(lock_file).read_text(encoding="ascii", errors="replace").split("\n")[0].strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal sent: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _open_lock_file(path: Path) -> int:
    """Open (or create) the lock file; a link planted at its name is replaced by a file, never followed."""
    for _ in range(8):
        try:
            return os.open(path, _FLAGS, 0o644)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # the link itself, not what it points to
        with contextlib.suppress(FileExistsError):
            return os.open(path, _FLAGS | os.O_EXCL, 0o644)
    raise OSError(errno.ELOOP, f"{path} keeps being replaced by a symbolic link")


class FolderLock:
    """Exclusive locks on stage folders, refusing a busy one with `busy` (a stage's error class)."""

    def __init__(self, busy: type[Exception]) -> None:
        self.busy = busy

    def _take(self, fd: int, path: Path, folder: Path) -> None:
        """Take the lock, or raise `busy` naming the holder. The holder writes its pid just after taking it, so a
        file still naming a dead process (or none) is read again for a moment, the lock tried again meanwhile."""
        deadline = time.monotonic() + RETRY_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                holder = lock_holder(path)
                alive = holder is not None and _alive(holder)
                if alive or time.monotonic() > deadline:
                    who = f"pid {holder}" if alive else "a process whose pid is not written yet"
                    raise self.busy(f"{folder} is in use by another datahunt process ({who}): one writer per "
                                    "folder; wait for it to end, or use another folder") from None
                time.sleep(0.01)

    @contextlib.contextmanager
    def hold(self, folder: Path, *, lock_file: Path | None = None) -> Iterator[Path]:
        """Hold the lock of `folder` (created if missing) for the block; yield the lock file's path.

        `lock_file` overrides where the lock lives (default `folder/LOCK_FILE`): a stage that replaces its
        folder whole by a rename (publish) keeps the lock beside it. Raises `busy` naming the holder's pid
        when another process holds it."""
        path = Path(lock_file) if lock_file is not None else Path(folder) / LOCK_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_lock_file(path)
        try:
            self._take(fd, path, folder)
            pid = f"{os.getpid()}\n".encode("ascii")
            os.pwrite(fd, pid, 0)  # over the last holder's pid, then cut to length: never an empty file
            os.ftruncate(fd, len(pid))
            _HELD.add(fd)
            yield path
        finally:
            _HELD.discard(fd)
            os.close(fd)  # closing the descriptor releases the lock (as the kernel does when the process dies)
