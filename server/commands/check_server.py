"""`datahunt check-server`: a draft checked against the server that serves it, before anything is measured there.

The preflight reads what the server says it runs (`inference.server_info`, SGLang or vLLM) and the exported
draft, and `training.preflight` compares them (algorithm, draft path and weights, layers, context, dtype); the
command prints every check and exits 0 only when all pass. `eval-accept --server` runs the same preflight
first and measures nothing on a server that fails it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from core.target_config import read_target_config
from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail
from server.commands.retraining_errors import user_errors

if TYPE_CHECKING:
    from core.target_config import ModelConfig


def _target_config(folder: Path | None, served_model: object) -> ModelConfig | None:
    """The target's config.json: --target-config, else the server's model_path when it is a local folder."""
    candidates = [folder] if folder else [Path(str(served_model or ""))]
    for candidate in candidates:
        if candidate and (config := read_target_config(candidate)) is not None:
            return config
    if folder:
        fail(f"no config.json in {folder}", EXIT_USAGE)
    return None


def preflight(url: str, draft: Path, target_config: Path | None) -> tuple[bool, list[Any], Any]:
    """Run every check against the server at `url`; return (all passed, the checks, the server's ServerInfo)."""
    from inference.server_info import get_server_info
    from training.preflight import read_draft, run_preflight

    try:  # a ServerInfoError (no builtin base) passes on to the CLI's map: one line, exit 1
        info = get_server_info(url)
        checkpoint = read_draft(draft)
        checks = run_preflight(info, checkpoint, _target_config(target_config, info.raw.get("model_path")))
    except user_errors() as exc:
        fail(str(exc), EXIT_FAILED)
    return all(c.ok for c in checks), checks, info


def print_checks(checks: list[Any], as_json: bool) -> None:
    """The checks as JSON on stdout, or as a table of pass/FAIL and why."""
    if as_json:
        typer.echo(json.dumps([{"check": c.name, "ok": c.ok, "detail": c.detail} for c in checks]))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("check", "result", "explanation", show_lines=True)
    for c in checks:
        table.add_row(c.name, "[green]pass[/green]" if c.ok else "[red]FAIL[/red]", c.detail)
    Console(width=140).print(table)


def check_server(
    url: str = typer.Argument(..., help="SGLang or vLLM server base URL (the serving engine is detected)."),
    draft: Path = typer.Option(..., "--draft", help="Exported draft folder."),
    target_config: Path | None = typer.Option(None, "--target-config",
                                              help="Target folder with config.json (default: server's model_path)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Check a draft against a running server; exit 0 only when every check passes."""
    ok, checks, _ = preflight(url, draft, target_config)
    print_checks(checks, as_json)
    if not ok:
        raise typer.Exit(EXIT_FAILED)  # the failed checks are printed above
