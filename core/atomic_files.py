"""Writing a stage's files inside its output folder: never through a link, never half, never at a guessed name.

One implementation every stage's writers share (each stage binds it to its own error class in its
`atomic_files.py`, so a refusal is that stage's error). A path is written relative to a root folder (the output
folder the user named): each folder below the root is opened with `O_NOFOLLOW | O_DIRECTORY`, so a link planted
at a folder name is refused instead of followed; a file is first written to a fresh temporary name created with
`O_CREAT | O_EXCL | O_NOFOLLOW` beside its target (a random name, so a link planted at a predictable name
such as `report.json.tmp` is never opened), flushed, and renamed over the target relative to the same folder
descriptor (a rename replaces a link at the target name itself, it never writes through it). A failed or
interrupted write removes its temporary file; a killed one leaves only a `.tmp-*` file, never a half target.
Appends (journals, logs) open the file itself with `O_APPEND | O_NOFOLLOW`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | _CLOEXEC
_TMP_PREFIX = ".tmp-"
_TMP_ATTEMPTS = 8


class OutputFiles:
    """The writers, raising `unsafe` (a stage's ValueError subclass) where a write would follow a link or leave
    its folder."""

    def __init__(self, unsafe: type[ValueError]) -> None:
        self.unsafe = unsafe

    def _relative(self, path: Path, root: Path) -> tuple[str, ...]:
        try:
            parts = Path(path).relative_to(root).parts
        except ValueError:
            raise self.unsafe(f"{path} is not inside {root}") from None
        if not parts or ".." in parts:
            raise self.unsafe(f"{path} is not a file inside {root}")
        return parts


    def _is_link(self, folder_fd: int, name: str) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)
        except OSError:
            return False


    def _open_child(self, parent_fd: int, name: str, shown: str, *, create: bool) -> int:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent_fd)
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and self._is_link(parent_fd, name):
                raise self.unsafe(f"{shown} is a symbolic link; outputs are never written through links") from None
            raise


    @contextlib.contextmanager
    def folder(self, root: Path, parts: tuple[str, ...] = (), *, create: bool = True) -> Iterator[int]:
        """Yield a descriptor of `root / parts…`, each part opened without following a link (created if missing)."""
        if create:
            Path(root).mkdir(parents=True, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        try:
            for index, part in enumerate(parts):
                child = self._open_child(fd, part, str(Path(root, *parts[: index + 1])), create=create)
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)


    def _create_temporary(self, folder_fd: int, name: str) -> tuple[str, int]:
        for _ in range(_TMP_ATTEMPTS):
            tmp = f"{_TMP_PREFIX}{secrets.token_hex(8)}-{name[:64]}"
            try:
                return tmp, os.open(tmp, _TMP_FLAGS, 0o644, dir_fd=folder_fd)
            except FileExistsError:
                continue
        raise self.unsafe(f"could not create a temporary file for {name} after {_TMP_ATTEMPTS} tries")


    @contextlib.contextmanager
    def staged_file(self, path: Path, *, root: Path | None = None) -> Iterator[BinaryIO]:
        """Yield a new binary file that becomes `path` (inside `root`, default its own folder) only when the block
        ends without an error; on any error (a full disk included) the temporary file is removed."""
        root = Path(root) if root is not None else Path(path).parent
        parts = self._relative(Path(path), root)
        with self.folder(root, parts[:-1]) as folder_fd:
            tmp, fd = self._create_temporary(folder_fd, parts[-1])
            try:
                with os.fdopen(fd, "wb") as handle:
                    yield handle
                    handle.flush()
                    os.fsync(handle.fileno())
                try:
                    os.replace(tmp, parts[-1], src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
                except IsADirectoryError:
                    raise self.unsafe(f"{path} is a folder") from None
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=folder_fd)
                raise


    def write_file(self, path: Path, data: bytes, *, root: Path | None = None) -> None:
        """Write `data` as `path` whole (see `staged_file`)."""
        with self.staged_file(path, root=root) as handle:
            handle.write(data)


    def open_append(self, path: Path, *, root: Path | None = None) -> BinaryIO:
        """Return `path` opened for appending in binary, created if missing; a link at that name is refused."""
        root = Path(root) if root is not None else Path(path).parent
        parts = self._relative(Path(path), root)
        with self.folder(root, parts[:-1]) as folder_fd:
            try:
                fd = os.open(parts[-1], _APPEND_FLAGS, 0o644, dir_fd=folder_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self.unsafe(f"{path} is a symbolic link; outputs are never written through links") from None
                raise
        return os.fdopen(fd, "ab")


    def remove_file(self, path: Path, *, root: Path | None = None) -> None:
        """Remove `path` if it is there (a link is removed itself, never what it points to)."""
        root = Path(root) if root is not None else Path(path).parent
        parts = self._relative(Path(path), root)
        with contextlib.suppress(FileNotFoundError), self.folder(root, parts[:-1], create=False) as folder_fd:
            os.unlink(parts[-1], dir_fd=folder_fd)


    def read_own(self, path: Path, *, root: Path | None = None) -> bytes | None:
        """Return the bytes of the file at `path`, or None when there is none or it (or a folder below `root`) is a
        link: a reader never takes a planted link for an output of its own."""
        root = Path(root) if root is not None else Path(path).parent
        parts = self._relative(Path(path), root)
        try:
            with self.folder(root, parts[:-1], create=False) as folder_fd:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC, dir_fd=folder_fd)
        except self.unsafe:
            return None
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EISDIR):
                return None
            raise
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            return handle.read()


    def remove_temporaries(self, folder_path: Path, *, root: Path | None = None) -> None:
        """Remove the temporary files a killed writer left in `folder_path` (only this module's `.tmp-*` names)."""
        root = Path(root) if root is not None else Path(folder_path)
        parts = () if Path(folder_path) == root else self._relative(Path(folder_path), root)
        with contextlib.suppress(FileNotFoundError, NotADirectoryError), self.folder(root, parts, create=False) as fd:
            for name in os.listdir(fd):
                if name.startswith(_TMP_PREFIX) and not self._is_dir(fd, name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=fd)


    def _is_dir(self, folder_fd: int, name: str) -> bool:
        try:
            return stat.S_ISDIR(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)
        except OSError:
            return False
