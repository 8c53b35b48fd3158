"""How a command ends when it cannot do its work: one line on stderr, one exit code per kind of failure.

Every command ends an error through `fail(message, code)`, which never returns. The codes are two, the same in
every command: `EXIT_USAGE` (2) when the input is wrong and nothing was started (a bad option value, a missing
file, an unknown category: click's own code for a bad command line), `EXIT_FAILED` (1) when the work was tried
and did not succeed (a source failed to load, a server refused, a check failed). A command that prints its
own verdict lines (a preflight, a template check) ends with `typer.Exit(EXIT_FAILED)` after them.

A stage's error that escapes a command is ended here too, in one place: the CLI's group (`server/cli.py`)
hands it to `exit_code_for`, which reads this table, and `fail` prints its one line (no traceback). An
exception of no stage is a bug and keeps its traceback.

    escaping error                                         exit  why
    training.interrupt.TrainingStopped                     128+n the shell's code for a run ended by signal n
    bad input, nothing started:                            2
      curation: ManifestError, FormatError, EngineError,         a manifest, mapping, curation engine, folder or
        PublishError, UnsafePathError, InvalidValueError         value the user gave cannot be used
      inference: InputError, UnknownRunError, UnsafePathError    an input file or run id that is not there
      training: ConfigError, DataError, LaunchError, CurveError, run settings, rows, flags or paths that
        CaptureError, UnsafePathError                            contradict or cannot be used
    any other AgentError, GraphError, CurationError,       1     the work was tried and failed (a source, a
      InferenceError, TrainingError                              server, a campaign, a checkpoint)

Classes are found by module and name among the modules already imported (an error whose module was never
loaded cannot have been raised), so `datahunt --help` imports no stage, and the front doors name the agents'
root without importing `agents/` (they reach the agents only through `graph/`).
"""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

EXIT_FAILED = 1  # the work was tried and failed
EXIT_USAGE = 2  # the input was wrong: nothing was started

STAGE_ROOTS = (("agents.errors", "AgentError"), ("graph.errors", "GraphError"), ("curation.errors", "CurationError"),
               ("inference.errors", "InferenceError"), ("training.errors", "TrainingError"))
BAD_INPUT = (
    ("curation.manifest", "ManifestError"), ("curation.adapters", "FormatError"), ("curation.engine", "EngineError"),
    ("curation.publish", "PublishError"), ("curation.atomic_files", "UnsafePathError"),
    ("curation.catalog.errors", "InvalidValueError"),
    ("inference.records", "InputError"), ("inference.run_registry", "UnknownRunError"),
    ("inference.atomic_files", "UnsafePathError"),
    ("training.config", "ConfigError"), ("training.data", "DataError"), ("training.launch", "LaunchError"),
    ("training.curve.plan", "CurveError"),
    ("training.capture", "CaptureError"), ("training.atomic_files", "UnsafePathError"),
)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print `error: message` on stderr (one line, no traceback) and end the command with `code`."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def outage_line(exc: BaseException) -> str:
    """The one line for a catalog database that failed under a command (down, a damaged SQLite file, a full
    disk), the same in every command: what the driver said, first line only."""
    from curation.catalog.database import outage_reason

    return f"cannot use the catalog database: {outage_reason(exc)}"


def _loaded(names: tuple[tuple[str, str], ...]) -> tuple[type, ...]:
    """The classes of `names` whose module is imported already."""
    found = (getattr(sys.modules.get(module), name, None) for module, name in names)
    return tuple(c for c in found if isinstance(c, type))


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code for a stage error escaping a command, by the table above; None for any other exception."""
    if not isinstance(exc, _loaded(STAGE_ROOTS)):
        return None
    stopped = getattr(sys.modules.get("training.interrupt"), "TrainingStopped", None)
    if isinstance(stopped, type) and isinstance(exc, stopped):
        return int(exc.exit_code)  # type: ignore[attr-defined]
    return EXIT_USAGE if isinstance(exc, _loaded(BAD_INPUT)) else EXIT_FAILED


def end_stage_error(exc: BaseException) -> None:
    """End the command through `fail` when `exc` is a stage error (its first line, its mapped code); else return."""
    code = exit_code_for(exc)
    if code is not None:
        fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, code)
