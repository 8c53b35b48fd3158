"""`datahunt serve` on a port that is taken: one error line, and no banner saying the service is up."""

from __future__ import annotations

import socket

from typer.testing import CliRunner

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
