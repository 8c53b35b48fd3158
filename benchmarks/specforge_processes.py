"""The SpecForge side-by-side's child processes (benchmarks/specforge_side.py): each stage runs one, in its own
process group, under a time limit, with SpecForge's environment or datahunt's; a TERM of the parent (an outer
`timeout`) or Ctrl-C passes to the child's group, which checkpoints and ends.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHIM = ROOT / "benchmarks" / "specforge" / "specforge_shim"
STEP_LINE = re.compile(r"^step (\d+): (\{.*\})\s*$")


def sf_env(args: argparse.Namespace, cuda: bool) -> dict[str, str]:
    """SpecForge's processes: its own site (pydantic of its wheels) and the `datasets` stand-in, nothing of
    datahunt's; Triton's interpreter on a CPU (SpecForge's loss is a Triton kernel)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{args.sf_site}{os.pathsep}{SHIM}"
    env["PYTHONUNBUFFERED"] = "1"
    if not cuda:
        env["TRITON_INTERPRET"] = "1"
    return env


def dh_env() -> dict[str, str]:
    """datahunt's processes: the caller's path with the repo first (and /tmp/site's wheels where present)."""
    env = dict(os.environ)
    parts = [str(ROOT)] + (["/tmp/site"] if Path("/tmp/site").is_dir() else [])
    env["PYTHONPATH"] = os.pathsep.join(parts + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    return env


RUNNING: list[subprocess.Popen[str]] = []  # the child of the stage in flight
STOP = threading.Event()  # set by a TERM or Ctrl-C of this process: no new stage starts


def request_stop(signum: int | None = None, frame: Any = None) -> None:
    """A TERM (an outer `timeout`) or Ctrl-C: pass it to the running child's whole group, which checkpoints and
    ends; this process keeps reading it until it has. The child's group is its own (so a kill reaches SpecForge's
    workers too) but not its session: whatever ends this command's session still ends the child, which must not
    train on into the next call."""
    STOP.set()
    for proc in list(RUNNING):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)


def run_child(cmd: list[str], env: dict[str, str], limit_s: float, log: Path,
              stop_at_step: int | None = None) -> dict[str, Any]:
    """Run cmd in its own process group, its output to the console and `log`; TERM to the group at limit_s
    (KILL 90 s later), on request_stop, or once a SpecForge step line reaches `stop_at_step` (the rehearsal's
    way to cut training where a time limit would, without depending on the machine's speed). Returns rc,
    whether it was stopped, the wall and the SpecForge step lines seen."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    steps: list[tuple[int, float]] = []
    last: dict[str, Any] = {}
    stopped = threading.Event()
    with log.open("a", encoding="utf-8") as fh, subprocess.Popen(
            cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            process_group=0) as proc:
        fh.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n")
        RUNNING.append(proc)

        def stop() -> None:
            if proc.poll() is None:
                stopped.set()
                os.killpg(proc.pid, signal.SIGTERM)
                if not _wait(proc, 90):
                    os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(max(1.0, limit_s), stop)
        timer.daemon = True
        timer.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            sys.stdout.write(line)
            match = STEP_LINE.match(line.strip())
            if match:
                steps.append((int(match.group(1)), time.perf_counter()))
                with contextlib.suppress(ValueError, SyntaxError):
                    last = {"step": int(match.group(1)), **ast.literal_eval(match.group(2))}
                if stop_at_step is not None and int(match.group(1)) >= stop_at_step and not stopped.is_set():
                    threading.Thread(target=stop, daemon=True).start()
        rc = proc.wait()
        timer.cancel()
        RUNNING.remove(proc)
    return {"rc": rc, "stopped": stopped.is_set() or STOP.is_set(), "wall_s": round(time.perf_counter() - started, 1),
            "steps": steps, "last": last}


def _wait(proc: subprocess.Popen[str], seconds: float) -> bool:
    try:
        proc.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False
