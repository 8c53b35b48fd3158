"""Settings: env prefix, defaults, secrets kept secret, URL and data-dir resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import Settings, get_settings
from core.types import Category, MalformedHubIdError, UnknownCategoryError, parse_category, parse_hub_id


def test_default_database_is_sqlite_under_home(tmp_path: Path) -> None:
    settings = get_settings()
    assert settings.resolved_database_url == f"sqlite:///{(tmp_path / 'home' / 'catalog.db').resolve()}"
    assert settings.offline is True


def test_env_overrides_and_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAHUNT_DATABASE_URL", "postgresql+psycopg://u@h/db")
    monkeypatch.setenv("DATAHUNT_API_TOKEN", "s3cret")
    settings = Settings()
    assert settings.resolved_database_url == "postgresql+psycopg://u@h/db"
    assert settings.api_token is not None and settings.api_token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(settings)


def test_categories_are_the_ten_of_design() -> None:
    assert len(Category) == 10
    assert parse_category("Code-Review") is Category.CODE_REVIEW
    with pytest.raises(UnknownCategoryError, match="known categories"):
        parse_category("poetry")


@pytest.mark.parametrize("bad", ["", "noslash", "a/b/c", "-x/y", "x/y-", "a--b/c", "own er/name", "x/" + "n" * 97])
def test_malformed_hub_ids_are_refused(bad: str) -> None:
    with pytest.raises(MalformedHubIdError):
        parse_hub_id(bad)


def test_valid_hub_id_is_kept() -> None:
    assert parse_hub_id(" openai/gsm8k ") == "openai/gsm8k"
