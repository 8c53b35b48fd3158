"""How a command ends when it cannot do its work: one line on stderr, one exit code per kind of failure.

Every command ends an error through `fail(message, code)`, which never returns. The codes are two, the same in
every command: `EXIT_USAGE` (2) when the input is wrong and nothing was started (a bad option value, a missing
file, an unknown category: click's own code for a bad command line), `EXIT_FAILED` (1) when the work was tried
and did not succeed (a source failed to load, a server refused, a check failed). A command that prints its
own verdict lines (a preflight, a template check) ends with `typer.Exit(EXIT_FAILED)` after them.
"""

from __future__ import annotations

from typing import NoReturn

import typer

EXIT_FAILED = 1  # the work was tried and failed
EXIT_USAGE = 2  # the input was wrong: nothing was started


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print `error: message` on stderr (one line, no traceback) and end the command with `code`."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
