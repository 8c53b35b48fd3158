"""`datahunt manifest from-mirror` and `datahunt curate` through the real CLI app: output and one-line errors."""

from __future__ import annotations

import json
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.settings import get_settings
from server.cli import app

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"
runner = CliRunner()


@pytest.mark.slow
def test_from_mirror_then_curate(tmp_path: Path) -> None:
    manifest_path = tmp_path / "manifest.json"
    result = runner.invoke(app, ["manifest", "from-mirror", str(MIRROR), "--out", str(manifest_path)])
    assert result.exit_code == 0, result.output
    assert "20 source(s)" in result.output and f"written to {manifest_path.resolve()}" in result.output
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
    empty = tmp_path / "empty.json"  # a manifest exported before anything was approved
    empty.write_text(json.dumps({"schema_version": 1, "sources": []}))
    result = runner.invoke(app, ["curate", "--manifest", str(empty), "--out", str(tmp_path / "e")])
    assert result.exit_code == 2 and "names no sources: approve datasets in the catalog" in result.output
    assert not (tmp_path / "e" / "report.json").exists()  # nothing that looks like a finished set


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_huggingface_hub_offline_mode_counts_as_unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.delenv("DATAHUNT_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read once at import, which may precede the env
    get_settings.cache_clear()
    result = runner.invoke(app, ["curate", "--manifest", str(_mixed_manifest(tmp_path)), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "the Hub is unreachable (huggingface_hub offline mode (HF_HUB_OFFLINE))" in result.output


@pytest.mark.slow
def test_a_bare_manifest_name_is_found_in_the_data_directory(tmp_path: Path) -> None:
    data_dir = get_settings().resolved_data_dir
    data_dir.mkdir(parents=True)
    source = {"hub_id": "openai/gsm8k", "config": "main", "category": "math", "max_rows": 5}
    (data_dir / "m-bare.json").write_text(json.dumps({"schema_version": 1, "sources": [source], "mirror": str(MIRROR)}))
    assert not Path("m-bare.json").exists()
    result = runner.invoke(app, ["curate", "--manifest", "m-bare.json", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert f"using {data_dir / 'm-bare.json'} (from the data directory)" in result.stderr
    assert json.loads((tmp_path / "out" / "report.json").read_text())["rows_out"] == 5
    missing = runner.invoke(app, ["curate", "--manifest", "nowhere.json", "--out", str(tmp_path / "o2")])
    assert missing.exit_code == 2 and "nowhere.json" in missing.output


RECORDED_HUB = Path(__file__).resolve().parents[1] / "data" / "recorded" / "hub"


@pytest.fixture
def recorded_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """huggingface_hub's own client answering from recorded Hub API JSON; yields the paths it was asked."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    from agents import backends

    seen: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.path)
        if request.url.path.startswith("/api/datasets/openai/gsm8k"):
            return httpx2.Response(200, json=json.loads((RECORDED_HUB / "dataset_info_gsm8k_files.json").read_text()))
        return httpx2.Response(404, headers={"X-Error-Code": "RepoNotFound"}, json={"error": "Repository not found"})

    monkeypatch.delenv("DATAHUNT_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(backends, "probe_hub", lambda: None)  # the Hub "answers"; its API is the recording
    get_settings.cache_clear()
    _http.set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(answer)))
    yield seen
    _http.set_client_factory(_http.default_client_factory)


def test_check_says_where_each_source_resolves_with_sizes(tmp_path: Path, recorded_hub: list[str]) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "tatsu-lab/alpaca").mkdir(parents=True)
    shutil.copy(MIRROR / "tatsu-lab/alpaca/seed_tasks.jsonl", mirror / "tatsu-lab/alpaca/seed_tasks.jsonl")
    entries = [e for e in json.loads((MIRROR / "MIRROR.json").read_text()) if e["id"] == "tatsu-lab/alpaca"]
    (mirror / "MIRROR.json").write_text(json.dumps(entries))
    path = tmp_path / "m.json"
    sources = [
        {"hub_id": "tatsu-lab/alpaca", "category": "general_chat"},
        {"hub_id": "openai/gsm8k", "config": "main", "category": "math"},
        {"hub_id": "nobody/absent", "category": "math"},
    ]
    path.write_text(json.dumps({"schema_version": 1, "sources": sources, "mirror": str(mirror)}))
    result = runner.invoke(app, ["curate", "--manifest", str(path), "--out", str(tmp_path / "out"), "--check",
                                 "--json"])
    assert result.exit_code == 1
    found = {r["name"]: r for r in json.loads(result.stdout)}
    assert found["tatsu-lab/alpaca"] == {**found["tatsu-lab/alpaca"], "where": "mirror", "files": 1,
                                         "size_bytes": 80870}
    assert found["openai/gsm8k:main"] == {**found["openai/gsm8k:main"], "where": "hub", "files": 3,
                                          "size_bytes": 419088 + 2306545 + 450555}
    assert "/api/datasets/openai/gsm8k" in recorded_hub
    assert found["nobody/absent"]["where"] == "missing"
    assert "RepositoryNotFoundError" in found["nobody/absent"]["detail"]
    assert "error: 1 of 3 sources resolve nowhere: nobody/absent" in result.stderr
    assert not (tmp_path / "out").exists()
    table = runner.invoke(app, ["curate", "--manifest", str(path), "--out", str(tmp_path / "out"), "--check"])
    assert "3.0 MiB" in table.stdout and "79.0 KiB" in table.stdout
    assert "sources: 2 of 3 resolve, 3.1 MiB in all" in table.stdout


def test_check_fails_on_missing_sources_only_and_states_the_eval_coverage(tmp_path: Path) -> None:
    """Offline, eval sets the mirror does not hold are a coverage to state, as `curate` states it, not an error;
    the count is curate's: the manifest's eval sets and those the mirror adds."""
    path = tmp_path / "m.json"
    evals = [{"name": "openai/gsm8k", "hub_id": "openai/gsm8k", "split": "test"},
             {"name": "nobody/absent-bench", "hub_id": "nobody/absent-bench", "split": "test"}]
    path.write_text(json.dumps({"schema_version": 1, "sources": [{"hub_id": "tatsu-lab/alpaca",
                                                                  "category": "general_chat"}],
                                "eval_sets": evals, "mirror": str(MIRROR)}))
    result = runner.invoke(app, ["curate", "--manifest", str(path), "--out", str(tmp_path / "out"), "--check"],
                           env={"DATAHUNT_OFFLINE": "1", "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("decontamination:"))
    done = runner.invoke(app, ["curate", "--manifest", str(path), "--out", str(tmp_path / "out")],
                         env={"DATAHUNT_OFFLINE": "1"})
    assert done.exit_code == 0, done.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    counted = report["decontamination"]["eval_sets"]
    assert f"of {counted} eval sets available (2 from the manifest, {counted - 2} the mirror adds)" in line
    assert "not available here, curate goes on without them: nobody/absent-bench" in line
    assert f"next: datahunt curate --manifest {path}" in result.stdout and "error" not in result.stderr


@pytest.mark.slow
def test_the_load_step_draws_a_bar_on_a_terminal_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = tmp_path / "m.json"
    sources = [{"hub_id": "openai/gsm8k", "config": "main", "category": "math", "max_rows": 5},
               {"hub_id": "tatsu-lab/alpaca", "category": "general_chat", "max_rows": 5}]
    manifest.write_text(json.dumps({"schema_version": 1, "sources": sources, "mirror": str(MIRROR)}))
    piped = runner.invoke(app, ["curate", "--manifest", str(manifest), "--out", str(tmp_path / "a")])
    assert piped.exit_code == 0 and "loading" not in piped.stderr
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich's own switch: treat the captured stream as a terminal
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    shown = runner.invoke(app, ["curate", "--manifest", str(manifest), "--out", str(tmp_path / "b")])
    assert shown.exit_code == 0 and "loading" in shown.stderr and "2/2" in shown.stderr
