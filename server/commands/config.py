"""`datahunt config path|show|set KEY VALUE|unset KEY`: the persistent config file below the environment.

The file (`core.settings.config_path`) makes a setting stick across shells and folders: `datahunt config set
offline true`, `datahunt config set home ~/datahunt` (a path is stored absolute, resolved from the folder it
is set in). `show` prints every setting as the commands see it, and where each value came from.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import typer

from server.commands.failure import EXIT_USAGE, fail

config_app = typer.Typer(help="The persistent config file (offline, catalog location, mirror, …).",
                         no_args_is_help=True)

SECRET_KEYS = {"hf_token", "llm_api_key", "api_token"}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def _read(path: Path) -> dict[str, Any]:
    try:
        return dict(tomllib.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        fail(f"config file {path} is not valid TOML: {exc}", EXIT_USAGE)
        return {}


def _write(path: Path, values: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{key} = {_toml_value(value)}\n" for key, value in sorted(values.items()))
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text("# datahunt settings (`datahunt config set KEY VALUE`); DATAHUNT_* variables override them\n"
                         + text, encoding="utf-8")
    temporary.replace(path)


@config_app.command("path")
def path_command() -> None:
    """Print the config file's path (DATAHUNT_CONFIG, else the user config folder's datahunt/config.toml)."""
    from core.settings import config_path

    typer.echo(str(config_path()))


@config_app.command("set")
def set_command(key: str = typer.Argument(..., help="Setting name, e.g. offline, home, database_url, mirror."),
                value: str = typer.Argument(..., help="Its value (true/false for switches).")) -> None:
    """Store one setting in the config file, checked as the commands will read it."""
    from pydantic import ValidationError

    from core.settings import Settings, config_path

    name = key.strip().lower().removeprefix("datahunt_")
    if name not in Settings.model_fields:
        fail(f"unknown setting {key!r}; known: {', '.join(sorted(Settings.model_fields))}", EXIT_USAGE)
    if name in SECRET_KEYS:
        fail(f"{name} is a secret: keep it in the environment (DATAHUNT_{name.upper()}), not in a file", EXIT_USAGE)
    try:
        checked = Settings.model_validate({name: value}).model_dump()[name]
    except ValidationError as exc:
        fail(f"{name}: {exc.errors()[0]['msg']}", EXIT_USAGE)
        return
    from core.settings import PATH_KEYS

    path = config_path()
    values = _read(path)
    if name in PATH_KEYS:  # stored absolute, so the folder it was set from does not matter later
        value = str(Path(value).expanduser().resolve())
    values[name] = checked if isinstance(checked, bool | int | float) else value
    _write(path, values)
    typer.echo(f"{name} = {_toml_value(values[name])} written to {path}")


@config_app.command("unset")
def unset_command(key: str = typer.Argument(..., help="Setting name to remove from the file.")) -> None:
    """Remove one setting from the config file."""
    from core.settings import config_path

    path = config_path()
    values = _read(path)
    if values.pop(key.strip().lower(), None) is None:
        fail(f"{key!r} is not set in {path}", EXIT_USAGE)
    _write(path, values)
    typer.echo(f"{key} removed from {path}")


@config_app.command("show")
def show_command(as_json: bool = typer.Option(False, "--json", help="Print the settings as JSON.")) -> None:
    """Print the settings the commands use (secrets hidden) and the catalog they open."""
    from core.settings import config_path, get_settings

    settings = get_settings()
    shown = {k: ("***" if k in SECRET_KEYS and v is not None else v)
             for k, v in settings.model_dump(mode="json").items()}
    shown["catalog"] = settings.catalog_label
    if as_json:
        typer.echo(json.dumps({"config_file": str(config_path()), "settings": shown}, indent=2))
        return
    typer.echo(f"config file: {config_path()}{'' if config_path().is_file() else ' (none yet)'}")
    for key, value in shown.items():
        typer.echo(f"{key} = {value}")


def register(app: typer.Typer) -> None:
    """Attach the `config` group to the main app."""
    app.add_typer(config_app, name="config")
