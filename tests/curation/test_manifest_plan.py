"""The manifest resolved once: each source and eval set with its files, the mirror's eval entries added once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.settings import get_settings
from core.types import Category
from curation import manifest_plan
from curation.manifest import EvalSet, Manifest, Source
from curation.manifest_plan import plan_manifest
from curation.mirror import mirror_files, read_mirror_index
from curation.pipeline import curate
from curation.report import CurationReport

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def test_sources_and_eval_sets_resolve_once_to_their_files() -> None:
    entries = read_mirror_index(MIRROR)
    manifest = Manifest(
        sources=[
            Source(hub_id="openai/gsm8k", config="main", category=Category.MATH),
            Source(hub_id="local/own", data_files=["own/rows.jsonl"], category=Category.MATH),
        ],
        eval_sets=[EvalSet(name="gsm8k-test", hub_id="openai/gsm8k", split="test")],
    )
    plan = plan_manifest(manifest, MIRROR, entries)
    assert [(p.source.key, p.order) for p in plan.sources] == [("openai/gsm8k:main", 0), ("local/own", 1)]
    assert plan.sources[0].files and all(f.startswith("openai/gsm8k/") for f in plan.sources[0].files)
    assert plan.sources[1].files == ["own/rows.jsonl"]  # the manifest's own files win over the mirror
    names = [e.eval_set.name for e in plan.eval_sets]
    assert names[0] == "gsm8k-test" and "openai/gsm8k/test.jsonl" in plan.eval_sets[0].files
    mirror_evals = {e["id"] for e in entries if e.get("role") == "eval"}
    assert len(names) == len(set(names)) and any(n.split(":")[0] in mirror_evals for n in names[1:])
    assert plan_manifest(manifest, None, []).eval_sets[0].files == []  # no mirror: read from the Hub


def test_a_run_resolves_each_entry_once_and_writes_the_report_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def counted(entries: list[dict[str, Any]], hub_id: str, config: str | None, split: str) -> list[str]:
        asked.append(hub_id)
        return mirror_files(entries, hub_id, config, split)

    monkeypatch.setattr(manifest_plan, "mirror_files", counted)
    manifest = Manifest(
        sources=[Source(hub_id="openai/gsm8k", config="main", category=Category.MATH, max_rows=20)],
        eval_sets=[EvalSet(name="gsm8k-test", hub_id="openai/gsm8k", split="test")],
        mirror=str(MIRROR),
    )
    result = curate(manifest, tmp_path / "out", settings=get_settings())
    assert asked == ["openai/gsm8k", "openai/gsm8k"]  # the source, then the eval set: once each per run
    report = result.report
    assert report.rows_out == 20 and report.eval_sets["gsm8k-test"].items > 0
    assert report.shards == ["data/shard-00000.parquet"]
    text = (tmp_path / "out" / "report.json").read_text(encoding="utf-8")
    assert json.loads(text) == report.to_json()
    assert CurationReport.model_validate_json(text) == report
    # nothing changed: the report is read back from the file
    again = curate(manifest, tmp_path / "out", settings=get_settings())
    assert again.reused[-1] == "final" and again.report == report
