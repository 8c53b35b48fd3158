"""`--executor datatrove` against the in-process run: the same rows, drop reasons, report and files.

On the small mirror of `test_pipeline` (real files plus planted problems) and on a synthetic chat source
with planted exact, re-cased and reworded copies, split over several shards and partitions so the
out-of-core paths (hash partitions, band buckets, the k-way merge) really run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_pipeline import FILES, _files, _manifest, mirror  # noqa: F401 - the mirror fixture
from typer.testing import CliRunner

from core.settings import get_settings
from core.types import Category
from curation.engine import EngineUnavailable, UnknownEngine, check_engine, curate_on
from curation.engine import plan as engine_plan
from curation.manifest import Budget, EvalSet, Manifest, Source, dump_manifest
from curation.pipeline import curate
from server.cli import app

# What both runs write and must agree on byte for byte (the engine keeps its work files apart).
runner = CliRunner()
COMPARED = ("report.json", "summary.md", "mix.png", "samples.jsonl", "decontaminated.jsonl")


def _compare(local: Path, engine: Path) -> None:
    left, right = _files(local), _files(engine)
    shards = sorted(k for k in left if k.startswith("data/"))
    assert shards and shards == sorted(k for k in right if k.startswith("data/"))
    dropped = sorted(k for k in left if k.startswith("dropped/"))
    assert dropped == sorted(k for k in right if k.startswith("dropped/"))
    names = [*COMPARED, *shards, *dropped]
    assert [n for n in names if n in left and left[n] != right.get(n)] == []


@pytest.mark.slow
def test_engine_keeps_the_same_rows_on_the_mirror(mirror: Path, tmp_path: Path) -> None:  # noqa: F811
    manifest = _manifest(mirror, budget=Budget(total=60, shares={Category.MATH: 0.5}, seed=3))
    manifest.sources.append(Source(hub_id="gone/missing", data_files=["gone/x.jsonl"], category=Category.MATH))
    local = curate(manifest, tmp_path / "local", settings=get_settings(), jsonl=True).report
    lines: list[str] = []
    engine = curate_on("datatrove", manifest, tmp_path / "engine", settings=get_settings(), jsonl=True, workers=2,
                       progress=lines.append).report
    assert engine == local
    assert local.duplicates.exact >= 20 and local.decontaminated == 1
    assert local.failed_sources == ["gone/missing"]
    _compare(tmp_path / "local", tmp_path / "engine")
    assert any(line.startswith("stage:") for line in lines) and any(line.startswith("write:") for line in lines)
    assert any("failed shard: source gone/missing" in line and "at row 0" in line for line in lines)


def _synthetic(path: Path, rows: int, seed: int) -> None:
    """Write a ShareGPT source of distinct chats plus 10% planted exact, re-cased and reworded copies."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(3000)]
    chats: list[list[dict[str, str]]] = []
    for i in range(rows):
        prompt = " ".join(rng.choice(words) for _ in range(rng.randint(20, 60)))
        chats.append([{"from": "human", "value": f"Task {i}: {prompt}"},
                      {"from": "gpt", "value": " ".join(rng.choice(words) for _ in range(rng.randint(5, 40)))}])
    for n in range(rows // 10):
        origin = chats[rng.randrange(rows)]
        kind = ("exact", "recased", "reworded")[n % 3]
        text = origin[0]["value"]
        if kind == "recased":
            text = text.upper()
        elif kind == "reworded":
            tokens = text.split(" ")
            tokens[rng.randrange(1, len(tokens))] = "changed"
            text = " ".join(tokens)
        chats.insert(rng.randrange(len(chats)), [{"from": "human", "value": text}, origin[1]])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps({"conversations": c}) for c in chats) + "\n")


@pytest.mark.slow
def test_engine_matches_on_planted_copies_over_many_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mirror: Path  # noqa: F811
) -> None:
    _synthetic(mirror / "synthetic" / "chats.jsonl", 3000, seed=0)
    _synthetic(mirror / "synthetic" / "math.jsonl", 1500, seed=1)
    chats = (mirror / "synthetic" / "chats.jsonl").read_text().splitlines()
    with (mirror / "synthetic" / "math.jsonl").open("a") as handle:  # copies across sources too
        handle.write("\n".join(chats[:200]) + "\n")
    # Not JSON Lines from its first line: the source fails (a later broken line would be one row's drop).
    (mirror / "synthetic" / "tail.jsonl").write_text("{not json\n" + chats[5] + "\n")
    # Small shards and partitions so one source is read by several tasks and records cross partitions.
    monkeypatch.setattr(engine_plan, "SHARD_BYTES", 200_000)
    monkeypatch.setattr(engine_plan, "PARTITION_BYTES", 300_000)
    sources = [
        Source(hub_id="local/synthetic", data_files=["synthetic/chats.jsonl"], category=Category.GENERAL_CHAT),
        Source(hub_id="local/synthetic-math", data_files=["synthetic/math.jsonl"], category=Category.MATH),
        Source(hub_id="local/broken", data_files=["synthetic/tail.jsonl"], category=Category.REASONING),
    ]
    evals = [EvalSet(name="gsm8k-test", hub_id="openai/gsm8k", data_files=[FILES[1]])]
    manifest = Manifest(sources=sources, eval_sets=evals, mirror=str(mirror),
                        budget=Budget(total=2500, shares={Category.MATH: 0.4}, seed=7))
    local = curate(manifest, tmp_path / "local", settings=get_settings(), jsonl=True).report
    engine = curate_on("datatrove", manifest, tmp_path / "engine", settings=get_settings(), jsonl=True,
                       workers=2).report
    assert engine == local
    assert local.duplicates.near >= 50 and local.duplicates.exact >= 300
    assert local.per_category["math"].selected == 1000
    assert local.failed_sources == ["local/broken"]
    _compare(tmp_path / "local", tmp_path / "engine")
    shards = len(list((tmp_path / "engine" / "engine").glob("*/meta/00000-*.json")))
    assert shards > 1


@pytest.mark.slow
def test_sigkilled_run_resumes_without_rereading_finished_shards(mirror: Path, tmp_path: Path) -> None:  # noqa: F811
    _synthetic(mirror / "synthetic" / "chats.jsonl", 3000, seed=0)
    manifest = Manifest(
        sources=[*_manifest(mirror).sources,
                 Source(hub_id="local/synthetic", data_files=["synthetic/chats.jsonl"], category=Category.MATH)],
        eval_sets=[EvalSet(name="gsm8k-test", hub_id="openai/gsm8k", data_files=[FILES[1]])],
        mirror=str(mirror),
    )
    path = tmp_path / "manifest.json"
    path.write_text(dump_manifest(manifest))
    out = tmp_path / "engine"
    command = [sys.executable, "-c", "from server.cli import app; app(prog_name='datahunt')", "curate", "-m",
               str(path), "-o", str(out), "--executor", "datatrove", "--workers", "2"]
    child = subprocess.Popen(command, env=dict(os.environ), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stage_tasks = len(manifest.sources)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and child.poll() is None:
        if len(list(out.glob("engine/*/logs/stage/completions/*"))) == stage_tasks:
            os.killpg(child.pid, signal.SIGKILL)  # the CLI and its workers, after the stage job
            break
        time.sleep(0.02)
    assert child.wait() == -signal.SIGKILL
    assert not (out / "report.json").exists()
    work = next((out / "engine").iterdir())
    stamps = {p.name: p.stat().st_mtime_ns for p in (work / "rows").glob("*.parquet")}
    assert len(stamps) == stage_tasks
    lines: list[str] = []
    again = curate_on("datatrove", manifest, out, settings=get_settings(), workers=2, progress=lines.append)
    assert f"stage: {stage_tasks} task(s), {stage_tasks} already done" in lines
    assert {p.name: p.stat().st_mtime_ns for p in (work / "rows").glob("*.parquet")} == stamps
    assert again.report == curate(manifest, tmp_path / "local", settings=get_settings()).report


@pytest.mark.slow
def test_failed_source_is_tried_again_on_rerun(mirror: Path, tmp_path: Path) -> None:  # noqa: F811
    manifest = _manifest(mirror)
    manifest.sources.append(Source(hub_id="late/file", data_files=["late/rows.jsonl"], category=Category.MATH))
    first = curate_on("datatrove", manifest, tmp_path / "out", settings=get_settings(), workers=1).report
    assert first.failed_sources == ["late/file"]
    lines: list[str] = []  # the same inputs again: only the failed shard's task runs, and every job after it
    assert curate_on("datatrove", manifest, tmp_path / "out", settings=get_settings(), workers=1,
                     progress=lines.append).report == first
    tasks = len(manifest.sources)
    assert f"stage: {tasks} task(s), {tasks - 1} already done" in lines and "write: done" in " ".join(lines)
    assert not any(line.startswith(("dedup:", "write:")) and "already done" in line for line in lines)
    (mirror / "late").mkdir()
    (mirror / "late" / "rows.jsonl").write_text(json.dumps({"question": "What is two plus two, in words?",
                                                            "answer": "Four, written as a word."}) + "\n")
    second = curate_on("datatrove", manifest, tmp_path / "out", settings=get_settings(), workers=1).report
    assert second.failed_sources == [] and second.per_source["late/file"].selected == 1
    assert second == curate(manifest, tmp_path / "local", settings=get_settings()).report


def test_engine_names_are_checked() -> None:
    assert check_engine("local") == "local" and check_engine("datatrove") == "datatrove"
    with pytest.raises(UnknownEngine, match="known executors: local, datatrove"):
        check_engine("spark")


def test_missing_engine_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "datatrove" else real(name))
    with pytest.raises(EngineUnavailable, match=r"pip install 'datahunt\[engine\]'"):
        check_engine("datatrove")


@pytest.mark.slow
def test_outputs_are_readable_parquet(mirror: Path, tmp_path: Path) -> None:  # noqa: F811
    report = curate_on("datatrove", _manifest(mirror), tmp_path / "out", settings=get_settings(), workers=1).report
    rows = pq.read_table(tmp_path / "out" / "data" / "shard-00000.parquet").to_pylist()
    assert len(rows) == report.rows_out and rows[0]["id"]


@pytest.mark.slow
def test_cli_engine_option(mirror: Path, tmp_path: Path) -> None:  # noqa: F811
    from curation.manifest import dump_manifest

    path = tmp_path / "manifest.json"
    path.write_text(dump_manifest(_manifest(mirror)))
    result = runner.invoke(app, ["curate", "-m", str(path), "-o", str(tmp_path / "out"), "--engine", "datatrove",
                                 "--workers", "2"])  # the old spelling: still read, and warned
    assert result.exit_code == 0, result.output
    assert "`curate --engine` is now `--executor` (read as --executor datatrove)" in result.stderr
    assert f"[datatrove] stage: {len(_manifest(mirror).sources)} task(s)" in result.output
    assert "rows in" in result.output
    assert "Stats" not in result.output  # datatrove's own console log goes to its log folder
    bad = runner.invoke(app, ["curate", "-m", str(path), "-o", str(tmp_path / "x"), "--executor", "spark"])
    assert bad.exit_code == 2 and "known executors: local, datatrove" in bad.output
    assert len(bad.output.strip().splitlines()) == 1
