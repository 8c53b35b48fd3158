"""The `datahunt` command line: one typer app that gathers each stage's commands.

Every stage's commands live in `server/commands/<stage>.py` and expose `register(app)`. They import their
stage lazily inside the command so `datahunt --help` stays fast. Logging handlers are set up here, the
only entry point, and so is the one place a stage's error that escapes a command is ended (`StageErrorGroup`,
by the table in `server/commands/failure.py`).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import typer
from typer.core import TyperGroup

from server.commands.failure import end_stage_error


class StageErrorGroup(TyperGroup):
    """The top group: a stage's error escaping any command (or group) below it ends as one `error:` line with
    its mapped exit code; any other exception is a bug and propagates with its traceback."""

    def invoke(self, ctx: Any) -> Any:  # typer's own (vendored) click Context, which it does not export
        try:
            return super().invoke(ctx)
        except Exception as exc:
            end_stage_error(exc)
            raise


app = typer.Typer(
    name="datahunt",
    cls=StageErrorGroup,
    help="Find, vet, curate and regenerate EAGLE-3 draft training data, then retrain and check the draft.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# Command modules, in the order the stages run. Each module defines `register(app: typer.Typer) -> None`.
# Add a stage's module here when its commands exist.
COMMAND_MODULES: tuple[str, ...] = (
    "server.commands.campaign",
    "server.commands.catalog",
    "server.commands.manifest",
    "server.commands.curate",
    "server.commands.target",
    "server.commands.regen",
    "server.commands.write_prompts",
    "server.commands.serve",
    "server.commands.train",
    "server.commands.curve",
    "server.commands.value",
    "server.commands.engines",
    "server.commands.capture",
    "server.commands.publish",
    "server.commands.config",
)


SELF_LOGGING_LIBRARIES = ("datasets", "huggingface_hub")


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # These libraries print through their own stderr handler; passed on to ours too, every warning showed twice.
    for library in SELF_LOGGING_LIBRARIES:
        logging.getLogger(library).propagate = False
    from core.settings import ConfigFileError, get_settings

    try:
        get_settings()
    except ConfigFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _register_all() -> None:
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(app)


_register_all()
