"""Writing one file inside a folder atomically without ever following a symbolic link.

The export path is checked against the data directory when it is resolved, but a link planted afterwards (at
a parent folder, or at a predictable temporary name) would still redirect a plain `open()`. So the writer
walks down from the data directory one folder at a time with `O_NOFOLLOW | O_DIRECTORY` file descriptors,
creates a fresh temporary file beside the target with `O_CREAT | O_EXCL | O_NOFOLLOW` (a random name; an
existing file or link at that name is never opened), and renames it over the target relative to the same
folder descriptor. A folder that is a link, a path part that is a file, or a name the file system refuses is
a `ConfinedPathError` with the reason; the temporary file never outlives a failed write.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from pathlib import Path

logger = logging.getLogger(__name__)

NAME_MAX_BYTES = 255  # the longest file name POSIX file systems (ext4, xfs, tmpfs, …) accept
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_TMP_ATTEMPTS = 8


class ConfinedPathError(ValueError):
    """The file cannot be written at that place inside the folder (the message says why)."""


def check_name(name: str) -> None:
    """Raise ConfinedPathError when `name` cannot be a file or folder name (too long, empty, a NUL)."""
    if not name or name in (".", ".."):
        raise ConfinedPathError(f"{name!r} is not a file name")
    if "\x00" in name:
        raise ConfinedPathError("a file name may not contain a NUL byte")
    size = len(os.fsencode(name))
    if size > NAME_MAX_BYTES:
        raise ConfinedPathError(f"file name {name[:40]!r}… is {size} bytes long; the limit is {NAME_MAX_BYTES}")


def _open_folder(parent_fd: int, name: str, shown: str) -> int:
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfinedPathError(f"cannot create the folder {shown}: {exc.strerror}") from None
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(parent_fd, name):
            raise ConfinedPathError(f"{shown} is a symbolic link; exports never follow links") from None
        if exc.errno == errno.ENOTDIR:
            raise ConfinedPathError(f"{shown} is a file, not a folder") from None
        raise ConfinedPathError(f"cannot open the folder {shown}: {exc.strerror}") from None


def _is_link(parent_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def write_confined(root: Path, relative: Path, text: str) -> None:
    """Write `text` (UTF-8) to `root / relative` atomically; raise ConfinedPathError when it cannot be done
    there without leaving `root` or following a link. `relative` has no `..` and no absolute part."""
    parts = relative.parts
    if not parts or relative.is_absolute() or ".." in parts:
        raise ConfinedPathError(f"{relative} is not a path inside the folder")
    for part in parts:
        check_name(part)
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for index, part in enumerate(parts[:-1]):
            child = _open_folder(fd, part, "/".join(parts[: index + 1]))
            os.close(fd)
            fd = child
        _replace_in(fd, parts[-1], text.encode("utf-8"), shown=str(relative))
    finally:
        os.close(fd)


def _replace_in(folder_fd: int, name: str, data: bytes, *, shown: str) -> None:
    tmp, tmp_fd = _create_temporary(folder_fd)
    try:
        with os.fdopen(tmp_fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            # rename() replaces a link at the target name itself; it never writes through it.
            os.replace(tmp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        except IsADirectoryError:
            raise ConfinedPathError(f"{shown} is a folder") from None
        except OSError as exc:
            raise ConfinedPathError(f"cannot write {shown}: {exc.strerror}") from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=folder_fd)
        raise


def _create_temporary(folder_fd: int) -> tuple[str, int]:
    for _ in range(_TMP_ATTEMPTS):
        name = f".tmp-{secrets.token_hex(8)}"  # short: any target name that fits, fits beside it
        try:
            return name, os.open(name, _TMP_FLAGS, 0o644, dir_fd=folder_fd)
        except FileExistsError:
            logger.warning("temporary name %s already taken in the export folder; picking another", name)
    raise ConfinedPathError(f"could not create a temporary file after {_TMP_ATTEMPTS} tries")
