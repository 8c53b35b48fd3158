"""The one settings object of datahunt, read from `DATAHUNT_*` environment variables and a config file.

Every stage reads configuration through `get_settings()`; nothing else in the project reads `os.environ`.
Secrets are `SecretStr` so they never show up in logs or reprs. Below the environment sits one persistent
config file (TOML, the same keys as the fields without the prefix: `offline = true`, `home = "…"`,
`database_url = "…"`, `mirror = "…"`): `DATAHUNT_CONFIG` names it, else `$XDG_CONFIG_HOME/datahunt/config.toml`
(`~/.config/datahunt/config.toml`). Relative paths in it are read relative to the file's own folder, so a
command run from any folder opens the same catalog. Unknown keys are logged and ignored.
"""

from __future__ import annotations

import logging
import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

logger = logging.getLogger(__name__)

PATH_KEYS = ("home", "runs_dir", "mirror", "data_dir", "model_cache_dir")


class ConfigFileError(ValueError):
    """The config file exists but is not valid TOML (the message names the file and the line)."""


def config_path() -> Path:
    """Return the config file's path: `DATAHUNT_CONFIG`, else `$XDG_CONFIG_HOME` (or ~/.config)/datahunt/config.toml."""
    named = os.environ.get("DATAHUNT_CONFIG")
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "datahunt" / "config.toml"


def read_config_file(path: Path, known: set[str]) -> dict[str, Any]:
    """Return the settings a config file holds (relative paths made absolute from its folder); {} without one."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"config file {path} is not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known or key == "config":
            logger.warning("config file %s: unknown key %r ignored", path, key)
            continue
        if key in PATH_KEYS and isinstance(value, str):
            value = str((path.parent / Path(value).expanduser()).resolve())
        values[key] = value
    return values


class ConfigFileSource(PydanticBaseSettingsSource):
    """pydantic-settings source over the persistent config file, ranked below the environment."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: `__call__` reads the whole file at once."""
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return read_config_file(config_path(), set(self.settings_cls.model_fields))


class Settings(BaseSettings):
    """Process-wide configuration. Environment variables use the `DATAHUNT_` prefix."""

    model_config = SettingsConfigDict(env_prefix="DATAHUNT_", extra="ignore", env_file=None)

    home: Path = Field(default=Path(".datahunt"), description="Working folder: catalog database, caches, exports.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the catalog (sqlite:///… or postgresql+psycopg://…). "
        "Default: a SQLite file under `home`.",
    )
    offline: bool = Field(default=False, description="Never touch the network: the offline index only.")
    hf_token: SecretStr | None = Field(default=None, description="Hugging Face Hub token for gated/private data.")
    llm_base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint for the agents' LLM.")
    llm_model: str = Field(default="gpt-4o-mini", description="Model name sent to the agents' LLM endpoint.")
    llm_api_key: SecretStr | None = Field(default=None, description="API key for the agents' LLM endpoint.")
    llm_timeout_s: float = Field(default=60.0, gt=0, description="Timeout of one LLM call.")
    api_token: SecretStr | None = Field(
        default=None, description="Bearer token required by mutating API routes; unset means mutations are refused."
    )
    api_read_requires_token: bool = Field(default=False, description="Also require the token for read routes.")
    allowed_hosts: str = Field(
        default="localhost,127.0.0.1,[::1]",
        description="Comma-separated names the service answers to in the Host header (`*.example.org`; `*` any).",
    )
    sglang_url: str | None = Field(default=None, description="Default SGLang server for regeneration and checks.")
    runs_dir: Path | None = Field(default=None, description="Where regeneration runs are listed. Default: `home`/runs.")
    mirror: Path | None = Field(
        default=None, description="Folder of a local dataset mirror (with MIRROR.json) standing in for Hub downloads."
    )
    data_dir: Path | None = Field(
        default=None, description="Where exports (manifests) may be written. Default: `home`/data."
    )
    model_cache_dir: Path | None = Field(
        default=None,
        description="Where the embedding model's extracted weights are kept. Default: the user cache dir's "
        "datahunt/models (~/.cache/datahunt/models).",
    )
    search_timeout_s: float = Field(default=20.0, gt=0, description="Timeout of one search call to a backend.")
    search_retries: int = Field(default=2, ge=0, le=10, description="Retries of a failed search call.")
    lease_ttl_s: float = Field(
        default=30.0, gt=0,
        description="How long a campaign's lease lasts unrenewed before another replica takes it over.",
    )
    target_language: str = Field(
        default="en",
        min_length=2,
        description="Language of the target model (ISO 639-1); other-language sets are flagged.",
    )
    campaign_branch_timeout_s: float = Field(
        default=600.0, gt=0, description="Longest one category's subagent may run before its run is marked failed."
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments first, then `DATAHUNT_*` variables, then the config file (`config_path`)."""
        return init_settings, env_settings, ConfigFileSource(settings_cls), file_secret_settings

    @property
    def resolved_database_url(self) -> str:
        """The catalog URL: the configured one, else a SQLite file under `home`."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'catalog.db').resolve()}"

    @property
    def allowed_host_list(self) -> list[str]:
        """The allowed hosts as a list of non-empty, lower-cased names."""
        return [h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip()]

    @property
    def resolved_data_dir(self) -> Path:
        """The folder exports are confined to."""
        return (self.data_dir or self.home / "data").resolve()

    @property
    def catalog_label(self) -> str:
        """The catalog a command opens, as a person reads it: the SQLite file, or the URL without its password."""
        url = self.resolved_database_url
        if url.startswith("sqlite:///"):
            return url.removeprefix("sqlite:///")
        scheme, sep, rest = url.partition("://")
        credentials, at, host = rest.rpartition("@")
        return f"{scheme}{sep}{credentials.split(':', 1)[0]}{at}{host}" if at else url


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the cached process-wide settings (call `get_settings.cache_clear()` after changing the env)."""
    return Settings()
