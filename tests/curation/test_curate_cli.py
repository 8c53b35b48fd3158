"""`datahunt manifest from-mirror` and `datahunt curate` through the real CLI app: output and one-line errors."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.settings import get_settings
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


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _mixed_manifest(tmp_path: Path) -> Path:
    path = tmp_path / "m.json"
    sources = [
        {"hub_id": "openai/gsm8k", "config": "main", "category": "math", "max_rows": 20},
        {"hub_id": "nobody/absent-a", "category": "math"},
        {"hub_id": "nobody/absent-b", "category": "general_chat"},
    ]
    path.write_text(json.dumps({"schema_version": 1, "sources": sources, "mirror": str(MIRROR)}))
    return path


def test_unreachable_hub_fails_missing_sources_at_once_and_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    from agents import backends

    monkeypatch.delenv("DATAHUNT_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    get_settings.cache_clear()
    probes: list[str] = []
    url, real_probe = f"http://127.0.0.1:{_closed_port()}/api/datasets", backends.probe_hub

    def probe() -> str | None:  # the real probe, aimed at a port nobody listens on
        probes.append(url)
        return real_probe(url, timeout_s=1.0)

    monkeypatch.setattr(backends, "probe_hub", probe)
    manifest, out = _mixed_manifest(tmp_path), tmp_path / "out"
    started = time.monotonic()
    result = runner.invoke(app, ["curate", "--manifest", str(manifest), "--out", str(out)])
    assert time.monotonic() - started < 20  # the Hub was retried for ~23 s per source before
    assert result.exit_code == 1, result.output
    assert len(probes) == 1
    assert "nobody/absent-a is not in the mirror and the Hub is unreachable (ConnectError" in result.output
    assert "2 of 3 source(s) failed: nobody/absent-a, nobody/absent-b" in result.output
    report = json.loads((out / "report.json").read_text())
    assert report["per_source"]["openai/gsm8k:main"]["selected"] == 20
    partial = runner.invoke(app, ["curate", "--manifest", str(manifest), "--out", str(out), "--allow-partial"])
    assert partial.exit_code == 0, partial.output
    assert "failed source" in partial.output and "error:" not in partial.output


def test_huggingface_hub_offline_mode_counts_as_unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATAHUNT_OFFLINE")
    get_settings.cache_clear()
    result = runner.invoke(app, ["curate", "--manifest", str(_mixed_manifest(tmp_path)), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "the Hub is unreachable (huggingface_hub offline mode (HF_HUB_OFFLINE))" in result.output
