"""The persistent config file: offline and the catalog location stick across shells and folders.

A command run from another folder must open the configured catalog, not an empty `./.datahunt`; and when the
catalog it opened is empty, it says which one it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.settings import Settings, get_settings
from curation.catalog import store
from server.cli import app

runner = CliRunner()


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config file of this test's own, and neither DATAHUNT_HOME nor DATAHUNT_OFFLINE in the environment."""
    path = tmp_path / "conf" / "config.toml"
    monkeypatch.setenv("DATAHUNT_CONFIG", str(path))
    monkeypatch.delenv("DATAHUNT_HOME")
    monkeypatch.delenv("DATAHUNT_OFFLINE")
    get_settings.cache_clear()
    return path


def seed_catalog(url: str) -> None:
    engine = store.make_engine(url)
    store.upgrade_database(engine)
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"])
        run = store.start_run(session, campaign_id=campaign.id, category="math")
        candidate = store.add_candidate(session, campaign_id=campaign.id, run_id=run.id, category="math",
                                        candidate={"hub_id": "openai/gsm8k", "relevance": 0.9})
        store.upsert_entry(session, candidate=candidate, decision="accept", reasons=[])
    engine.dispose()


def test_a_command_run_from_another_folder_finds_the_configured_catalog(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["config", "set", "home", "team-catalog"]).exit_code == 0
    done = runner.invoke(app, ["config", "set", "offline", "true"])
    assert done.exit_code == 0 and f"offline = true written to {config_file}" in done.output
    get_settings.cache_clear()
    home = (tmp_path / "team-catalog").resolve()
    assert get_settings().home == home and get_settings().offline is True
    seed_catalog(get_settings().resolved_database_url)

    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    get_settings.cache_clear()
    listed = runner.invoke(app, ["catalog", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [e["hub_id"] for e in json.loads(listed.stdout)] == ["openai/gsm8k"]
    assert not (elsewhere / ".datahunt").exists()
    shown = json.loads(runner.invoke(app, ["config", "show", "--json"]).stdout)
    assert shown["settings"]["catalog"] == str(home / "catalog.db") and shown["settings"]["offline"] is True

    monkeypatch.setenv("DATAHUNT_HOME", str(elsewhere / "other"))  # the environment still wins over the file
    get_settings.cache_clear()
    empty = runner.invoke(app, ["catalog", "list"])
    assert empty.exit_code == 0
    assert f"note: the catalog {(elsewhere / 'other' / 'catalog.db').resolve()} is empty" in empty.output
    for command in (["catalog", "summary"], ["campaign", "list"], ["manifest", "export"]):
        said = runner.invoke(app, command)
        assert "note: the catalog" in said.output and "is empty" in said.output, command
    missing = runner.invoke(app, ["catalog", "show", "org/missing"])
    assert missing.exit_code == 1
    assert "in the catalog " + str((elsewhere / "other" / "catalog.db").resolve()) in missing.output


def test_relative_paths_in_the_file_are_read_from_its_folder(config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text('home = "cat"\nmirror = "../mirror"\nno_such_key = 1\n')
    settings = Settings()
    assert settings.home == (config_file.parent / "cat").resolve()
    assert settings.mirror == (config_file.parent.parent / "mirror").resolve() and settings.offline is False


def test_bad_files_and_settings_are_one_line_errors(config_file: Path) -> None:
    assert runner.invoke(app, ["config", "set", "offlin", "true"]).exit_code == 2
    maybe = runner.invoke(app, ["config", "set", "offline", "maybe"])
    assert maybe.exit_code == 2 and "error: offline: Input should be a valid boolean" in maybe.output
    assert "secret" in runner.invoke(app, ["config", "set", "hf_token", "x"]).output
    config_file.parent.mkdir(parents=True)
    config_file.write_text("offline = [\n")
    get_settings.cache_clear()
    broken = runner.invoke(app, ["catalog", "list"])
    assert broken.exit_code == 2 and broken.output.startswith(f"error: config file {config_file} is not valid TOML")
    assert "Traceback" not in broken.output
