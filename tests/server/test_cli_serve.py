"""`datahunt serve` on a port that is taken: one error line, and no banner saying the service is up."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.settings import get_settings
from server.cli import app
from server.commands.serve import bind_socket

runner = CliRunner()


def test_a_busy_port_fails_before_the_ready_banner() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["serve", "--port", str(port), "--no-resume"])
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "review page" not in result.output and "Traceback" not in result.output


def test_a_free_port_is_bound_for_uvicorn() -> None:
    with bind_socket("127.0.0.1", 0) as sock:
        assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] > 0


def test_a_catalog_that_cannot_be_opened_fails_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the catalog's folder should be")
    monkeypatch.setenv("DATAHUNT_HOME", str(blocker / "home"))
    get_settings.cache_clear()
    for args in (["serve", "--port", "65432", "--no-resume"], ["campaign", "list"], ["campaign", "prune"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, args
        assert "cannot create the catalog's folder" in result.stderr, args
        assert "Traceback" not in result.output and "review page" not in result.output, args
    monkeypatch.setenv("DATAHUNT_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")  # nothing listens
    get_settings.cache_clear()
    result = runner.invoke(app, ["serve", "--port", "65432", "--no-resume"])
    assert result.exit_code == 1 and "cannot open the catalog at postgresql" in result.stderr
    assert "Traceback" not in result.output and "review page" not in result.output
