"""A read never creates a catalog: `catalog list|show|summary` and `campaign list|status`, run in a folder that
has no `.datahunt` (the default home is `./.datahunt`), read an empty catalog, say which one they looked for,
and leave the folder as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.settings import get_settings
from server.cli import app

runner = CliRunner()


def test_reads_in_a_folder_without_a_catalog_create_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATAHUNT_HOME")
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    for command in (["catalog", "list"], ["catalog", "summary"], ["campaign", "list"]):
        done = runner.invoke(app, command)
        assert done.exit_code == 0, (command, done.output)
        assert (f"the catalog {tmp_path / '.datahunt' / 'catalog.db'} is empty (no catalog file there yet)"
                in done.stderr)
    missing = runner.invoke(app, ["catalog", "show", "openai/gsm8k"])
    assert missing.exit_code == 1 and "no catalog entry for 'openai/gsm8k'" in missing.stderr
    assert runner.invoke(app, ["campaign", "status", "c1"]).exit_code == 1
    assert list(tmp_path.iterdir()) == []  # no `.datahunt` made where the command happened to run
    made = runner.invoke(app, ["catalog", "approve", "openai/gsm8k", "--reviewer", "ann"])  # a write does open it
    assert made.exit_code == 1 and (tmp_path / ".datahunt" / "catalog.db").is_file()
