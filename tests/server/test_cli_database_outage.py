"""The CLI on a catalog database that fails: one `error:` line and exit 1, never a traceback, on PostgreSQL (the
server not there) and on SQLite (the disk full), and the work goes on once the database is back.

The full disk is real: the command runs as its own process under a file-size limit (`RLIMIT_FSIZE`), so the
kernel refuses SQLite's writes past it as on a full disk (Python ignores the SIGXFSZ that comes with it).
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from test_api_catalog import seed
from typer.testing import CliRunner

from core.settings import get_settings
from curation.catalog import store
from graph.checkpoint import open_checkpointer
from server.cli import app

FILE_LIMIT = 64 * 1024  # SQLite's shared-memory index fits (32 KiB), a write-ahead log of a few pages, no more
NOBODY = "postgresql+psycopg://postgres@127.0.0.1:1/test"  # nothing listens on port 1
runner = CliRunner()


def one_error_line(stderr: str) -> str:
    """The one `error:` line of a failed command whose output holds no traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


@pytest.mark.postgres
@pytest.mark.parametrize("command", [
    ["catalog", "list"], ["catalog", "show", "openai/gsm8k"],
    ["catalog", "approve", "openai/gsm8k", "--reviewer", "ann"],
    ["catalog", "summary"], ["campaign", "list"], ["campaign", "status", "c1"], ["campaign", "prune"],
    ["campaign", "run", "--offline", "-c", "math"], ["manifest", "export", "--out", "m.json"],
], ids=lambda c: " ".join(c[:2]))
def test_a_postgres_server_that_is_not_there_is_one_line(command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAHUNT_DATABASE_URL", NOBODY)
    get_settings.cache_clear()
    result = runner.invoke(app, command)
    assert result.exit_code != 0, result.output  # 1, or the manifest commands' 2
    assert "Connection refused" in one_error_line(result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit)


def full_disk_run(
        args: list[str], database: Path, *, limit: int | None = FILE_LIMIT) -> subprocess.CompletedProcess[str]:
    """Run `datahunt ARGS` on the SQLite catalog `database` as its own process, every file capped at `limit`."""
    env = {**os.environ, "DATAHUNT_DATABASE_URL": f"sqlite:///{database}", "PYTHONDONTWRITEBYTECODE": "1"}
    cap = None if limit is None else (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    return subprocess.run([str(Path(sys.executable).parent / "datahunt"), *args], env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=cap)


@pytest.fixture
def sqlite_catalog(tmp_path: Path) -> Path:
    """A seeded SQLite catalog file larger than FILE_LIMIT, the campaign checkpointer's tables made."""
    path = tmp_path / "catalog.db"
    engine = store.make_engine(f"sqlite:///{path}")
    store.upgrade_database(engine)
    seed(engine)

    async def make_checkpoint_tables() -> None:
        async with open_checkpointer(f"sqlite:///{path}"):
            pass

    asyncio.run(make_checkpoint_tables())
    engine.dispose()
    assert path.stat().st_size > FILE_LIMIT
    return path


def test_a_review_on_a_full_disk_is_one_line_and_goes_through_once_there_is_room(sqlite_catalog: Path) -> None:
    review = ["catalog", "approve", "openai/gsm8k", "--reviewer", "ann", "-m", "n" * 100_000]  # a write of many pages
    full = full_disk_run(review, sqlite_catalog)
    assert full.returncode == 1
    assert one_error_line(full.stderr).startswith("error: cannot use the catalog database: ")
    shown = full_disk_run(["catalog", "show", "openai/gsm8k", "--json"], sqlite_catalog)  # reads still work
    assert shown.returncode == 0 and '"pending_review"' in shown.stdout
    again = full_disk_run(review, sqlite_catalog, limit=None)
    assert again.returncode == 0 and "approved by ann" in again.stdout, again.stderr[-2000:]


@pytest.mark.slow
def test_a_campaign_on_a_full_disk_is_one_line_and_resumes_once_there_is_room(sqlite_catalog: Path) -> None:
    # Room for the campaign's first rows, not for its first checkpoint of the graph's state.
    full = full_disk_run(["campaign", "run", "--offline", "-c", "math", "--id", "full1"], sqlite_catalog,
                         limit=4 * FILE_LIMIT)
    assert full.returncode == 1
    line = one_error_line(full.stderr)  # the store's error, or the graph's once it recorded the failure
    assert "disk I/O error" in line or "database or disk is full" in line, line
    assert "campaign resume" in line and "full1" in line
    resumed = full_disk_run(["campaign", "resume", "full1"], sqlite_catalog, limit=None)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "campaign full1: succeeded" in resumed.stdout
