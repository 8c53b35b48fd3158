"""Decontamination coverage is stated as it was: only eval sets whose prompts were loaded count as checked.

An exported manifest names every benchmark the catalog knows; offline, those missing from the mirror cannot be
loaded. They must not appear as checked (in report.json, summary.md or the published card), must not each
raise an ERROR line, and one warning must say how many were checked of how many.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from core.settings import get_settings
from core.types import Category
from curation.manifest import EvalSet, Manifest, Source, dump_manifest
from curation.pipeline import curate
from curation.publish import build_folder
from curation.report import DecontaminationCoverage, EvalSetStatus

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def test_the_warning_counts_checked_of_all_and_names_the_missing() -> None:
    status = {"a/ok": EvalSetStatus(items=3), "b/empty": EvalSetStatus(items=0),
              **{f"z/missing{n:02d}": EvalSetStatus(items=0, unavailable="not in the mirror") for n in range(10)}}
    cover = DecontaminationCoverage.of(status)
    assert cover.checked == ["a/ok"] and cover.failed == ["b/empty"] and len(cover.unavailable) == 10
    assert cover.warning() == (
        "decontaminated against 1 of 12 eval sets; 10 not available offline: " + ", ".join(
            f"z/missing{n:02d}" for n in range(8)) + ", … (+2 more; report.json lists all); 1 failed or empty: b/empty")
    assert DecontaminationCoverage.of({"a/ok": EvalSetStatus(items=3)}).warning() is None


def test_only_loaded_eval_sets_are_listed_as_checked_through_to_the_card(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = [f"acme/bench-{n}" for n in range(5)]
    manifest = Manifest(
        sources=[Source(hub_id="openai/gsm8k", config="main", category=Category.MATH, max_rows=20, license="MIT")],
        eval_sets=[EvalSet(name=name, hub_id=name) for name in missing],
        mirror=str(MIRROR),
    )
    out = tmp_path / "curated"
    with caplog.at_level(logging.DEBUG):
        curate(manifest, out, settings=get_settings())
    (out / "manifest.json").write_text(dump_manifest(manifest))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and "acme/bench" in r.getMessage()]
    assert any(r.levelno == logging.DEBUG and "acme/bench-0 not available" in r.getMessage() for r in caplog.records)

    report = json.loads((out / "report.json").read_text())
    loaded = sorted(name for name, s in report["eval_sets"].items() if s["items"] > 0)
    cover = report["decontamination"]
    assert cover["checked"] == loaded and "openai/gsm8k:main/test" in loaded
    assert cover["unavailable"] == missing and cover["eval_sets"] == len(loaded) + len(missing)
    line = f"decontaminated against {len(loaded)} of {len(loaded) + 5} eval sets; 5 not available offline: " + \
        ", ".join(missing)
    assert report["warnings"].count(line) == 1
    summary = (out / "summary.md").read_text()
    assert f"Checked against {len(loaded)} of {len(loaded) + 5} eval sets" in summary
    assert "| acme/bench-0 | 0 | not available: not in the mirror, and the run is offline |" in summary

    build_folder(out, tmp_path / "hub", repo_id="me/set", version="0")
    card = (tmp_path / "hub" / "README.md").read_text()
    listed = re.search(r"Evaluation sets checked: (.*)\.\n", card)
    assert listed is not None
    assert re.findall(r"`([^`]+)` \(\d+ prompts\)", listed.group(1)) == loaded
    assert f"checked against {len(loaded)} of {len(loaded) + 5} evaluation sets" in card
    assert "Not checked, 5 not available offline" in card and "`acme/bench-4`" in card
    assert f"  decontamination:\n    eval_sets: {len(loaded) + 5}\n    checked: {len(loaded)}\n    unavailable: 5\n" \
        "    failed: 0\n" in card

