"""Two writers on one stage folder, for the lock tests of every stage.

`start_paused` starts a `datahunt` command as a real process and stops it (SIGSTOP, its whole group) the moment
it holds its folder's lock, so a second command can be started on the same folder while the first is mid-run;
`second_writer` runs that second command; `lock_is_held` asks the kernel whether anyone holds a lock file.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from core.folder_lock import lock_holder

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from server.cli import app; app(prog_name='datahunt')"]


def lock_is_held(lock_file: Path) -> bool:
    """True when some process holds `lock_file`'s lock now (this process tries to take it, and lets go)."""
    fd = os.open(lock_file, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def start_paused(args: list[str], lock_file: Path, *, timeout_s: float = 240) -> subprocess.Popen[str]:
    """Start `datahunt ARGS` and stop it as soon as it has taken `lock_file` (its pid is written in it)."""
    process = subprocess.Popen([*CLI, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if lock_file.exists() and lock_holder(lock_file) == process.pid:
            os.killpg(process.pid, signal.SIGSTOP)
            assert lock_is_held(lock_file), "the first writer finished before it could be paused"
            return process
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"the first writer ended (exit {process.returncode}) before taking the lock: {err}")
        time.sleep(0.002)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError(f"the first writer took no lock in {timeout_s} s")


def resume(process: subprocess.Popen[str], timeout_s: float = 600) -> tuple[int, str, str]:
    """Let a paused writer go on; return its exit code, stdout and stderr once it ends."""
    os.killpg(process.pid, signal.SIGCONT)
    out, err = process.communicate(timeout=timeout_s)
    return process.returncode, out, err


def second_writer(args: list[str], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `datahunt ARGS` to its end (it should be refused at once)."""
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout_s)


def refused_naming(done: subprocess.CompletedProcess[str], pid: int) -> bool:
    """True when `done` exited 1 with exactly one `error:` line naming `pid` as the folder's holder, and no
    traceback."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return (done.returncode == 1 and len(errors) == 1 and f"(pid {pid})" in errors[0]
            and "Traceback" not in done.stderr)


def cleanup(process: subprocess.Popen[str]) -> None:
    """Kill a writer a failed test left paused (its whole group), and close its pipes."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
