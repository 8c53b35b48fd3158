"""The stage-folder lock (`core/folder_lock.py`): one holder at a time, the holder's pid named, and a holder
killed with SIGKILL leaves a folder the next writer takes at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from paused_writer import REPO, lock_is_held

from core.folder_lock import LOCK_FILE, FolderLock, lock_holder


class Busy(RuntimeError):
    pass


LOCK = FolderLock(Busy)
HOLD = ("import sys, time; from pathlib import Path; from core.folder_lock import FolderLock\n"
        "with FolderLock(RuntimeError).hold(Path(sys.argv[1])):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(600)\n")


def _holder(folder: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    process.stdout.close()
    return process


def test_a_second_holder_is_refused_naming_the_first_and_the_lock_ends_with_the_block(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    with LOCK.hold(folder) as lock_file:
        assert lock_file == folder / LOCK_FILE and lock_holder(lock_file) == os.getpid()
        with pytest.raises(Busy, match=rf"in use by another datahunt process \(pid {os.getpid()}\)"), LOCK.hold(folder):
            pass
    assert not lock_is_held(folder / LOCK_FILE)
    with LOCK.hold(folder):  # free again once the block ended, by an exception or not
        pass


def test_another_process_is_refused_while_one_holds_it(tmp_path: Path) -> None:
    holder = _holder(tmp_path / "out")
    try:
        with pytest.raises(Busy, match=rf"\(pid {holder.pid}\)"), LOCK.hold(tmp_path / "out"):
            pass
    finally:
        holder.kill()
        holder.wait()


def test_a_sigkilled_holder_leaves_the_folder_usable_at_once(tmp_path: Path) -> None:
    holder = _holder(tmp_path / "out")
    assert lock_is_held(tmp_path / "out" / LOCK_FILE)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with LOCK.hold(tmp_path / "out") as lock_file:  # no wait, no stale lock to remove by hand
        assert lock_holder(lock_file) == os.getpid()


def test_a_link_planted_at_the_lock_name_is_replaced_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / LOCK_FILE).symlink_to(outside)
    with LOCK.hold(tmp_path / "out") as lock_file:
        assert not lock_file.is_symlink()
    assert outside.read_text() == "keep"


def test_a_forked_child_does_not_keep_the_parents_lock(tmp_path: Path) -> None:
    """A curation engine forks its workers: a worker outliving its killed parent must not hold the folder."""
    read, write = os.pipe()
    started, ready = os.pipe()
    with LOCK.hold(tmp_path / "out"):
        child = os.fork()
        if child == 0:  # the worker: says it runs, then outlives the lock's block in the parent
            os.write(ready, b"r")
            os.read(read, 1)
            os._exit(0)
        assert os.read(started, 1) == b"r"
    try:
        assert not lock_is_held(tmp_path / "out" / LOCK_FILE)
    finally:
        os.write(write, b"x")
        os.waitpid(child, 0)
        for fd in (read, write, started, ready):
            os.close(fd)


def test_a_refusal_names_the_new_holder_not_the_last_ones_pid_still_in_the_file(tmp_path: Path) -> None:
    """The holder writes its pid just after taking the lock: a refusal in between waits for it, instead of naming
    the previous holder (a process that has ended) or none."""
    import fcntl
    import threading
    import time

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / LOCK_FILE).write_text(ended.stdout)  # the last holder's pid: that process is gone
    fd = os.open(folder / LOCK_FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the new holder has the lock, its pid not written yet

    def write_pid_late() -> None:
        time.sleep(0.1)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.ftruncate(fd, len(f"{os.getpid()}\n"))

    writer = threading.Thread(target=write_pid_late)
    writer.start()
    try:
        with pytest.raises(Busy, match=rf"\(pid {os.getpid()}\)"), LOCK.hold(folder):
            pass
    finally:
        writer.join()
        os.close(fd)
