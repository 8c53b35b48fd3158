"""`datahunt manifest from-mirror` and `datahunt curate` through the real CLI app: output and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from server.cli import app

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"
runner = CliRunner()


def test_from_mirror_then_curate(tmp_path: Path) -> None:
    manifest_path = tmp_path / "manifest.json"
    result = runner.invoke(app, ["manifest", "from-mirror", str(MIRROR), "--out", str(manifest_path)])
    assert result.exit_code == 0, result.output
    assert "15 source(s)" in result.output
    manifest = json.loads(manifest_path.read_text())
    # Keep the run small: a few sources, capped.
    manifest["sources"] = [
        dict(s, max_rows=30)
        for s in manifest["sources"]
        if s["hub_id"] in {"openai/gsm8k", "tatsu-lab/alpaca", "OpenBMB/ToolBench"}
    ]
    manifest["eval_sets"] = [e for e in manifest["eval_sets"] if e["name"] in {"openai/gsm8k:main/test"}]
    manifest_path.write_text(json.dumps(manifest))
    out = tmp_path / "out"
    result = runner.invoke(app, ["curate", "--manifest", str(manifest_path), "--out", str(out), "--jsonl"])
    assert result.exit_code == 0, result.output
    assert "rows in" in result.output and "math" in result.output
    assert (out / "samples.jsonl").is_file() and (out / "manifest.json").is_file()
    report = json.loads((out / "report.json").read_text())
    assert report["rows_out"] == len((out / "samples.jsonl").read_text().splitlines())


def test_bad_input_is_one_line_and_non_zero(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "sourcez": []}))
    result = runner.invoke(app, ["curate", "--manifest", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "sourcez" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(app, ["manifest", "from-mirror", str(tmp_path), "--out", str(tmp_path / "m.json")])
    assert result.exit_code == 2 and "not a mirror folder" in result.output
    result = runner.invoke(
        app, ["curate", "--manifest", str(bad), "--out", str(tmp_path / "o"), "--mirror", str(tmp_path)]
    )
    assert result.exit_code == 2 and "no MIRROR.json" in result.output
