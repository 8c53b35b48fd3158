"""Ctrl-C of `campaign run` while a `datahunt serve` shares the SQLite catalog: one line, never a traceback.

A real `serve` process runs on the catalog; while the campaign runs, a writer on that catalog holds SQLite's one
write lock (as serve's own writes do, the stand-in keeps it as long as the test needs). The interrupted command
used to wait out the 30 s busy timeout and then die with `sqlite3.OperationalError: database is locked`.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from core.settings import get_settings

CLI = [sys.executable, "-c", "from server.cli import app; app()"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _serving(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/catalog", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _campaign_started(db: Path) -> bool:
    try:
        with sqlite3.connect(db, timeout=1) as con:
            return bool(con.execute("SELECT count(*) FROM subagentrun").fetchone()[0])
    except sqlite3.Error:
        return False


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ctrl_c_while_serve_shares_a_locked_catalog_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    db = get_settings().resolved_database_url.removeprefix("sqlite:///")
    port = _free_port()
    serve = subprocess.Popen([*CLI, "serve", "--port", str(port), "--no-resume"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _serving(port), 60, "serve")
        run = subprocess.Popen([*CLI, "campaign", "run", "--offline", "--json"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: _campaign_started(Path(db)), 60, "the campaign's first run row")
        holder = sqlite3.connect(db, timeout=30, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # the catalog's write lock, as a writer sharing it holds it
        try:
            run.send_signal(signal.SIGINT)
            _out, err = run.communicate(timeout=120)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert serve.poll() is None  # serve is still up and shared the catalog throughout
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=30)
    assert "Traceback" not in err and "OperationalError" not in err, err[-2000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: interrupted; the catalog is locked"), err[-2000:]
    assert "datahunt campaign resume" in errors[0]
    assert run.returncode == 1
