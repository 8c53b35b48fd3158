"""Manifest contract: round trip, strictness, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.types import Category
from curation.manifest import Budget, Manifest, ManifestError, Source, dump_manifest, load_manifest


def test_round_trip(tmp_path: Path) -> None:
    manifest = Manifest(
        sources=[Source(hub_id="openai/gsm8k", config="main", category=Category.MATH, revision="abc")],
        budget=Budget(total=100, shares={Category.MATH: 0.5}),
    )
    path = tmp_path / "m.json"
    path.write_text(dump_manifest(manifest))
    assert load_manifest(path) == manifest


def test_unknown_field_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"schema_version": 1, "sources": [], "budgett": {}}))
    with pytest.raises(ManifestError, match="budgett"):
        load_manifest(path)


def test_bad_json_and_bad_hub_id(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(path)
    path.write_text(json.dumps({"sources": [{"hub_id": "no-slash", "category": "math"}]}))
    with pytest.raises(ManifestError, match="malformed Hub dataset id"):
        load_manifest(path)


def test_shares_over_one_rejected() -> None:
    with pytest.raises(ValueError, match="sum to"):
        Budget(total=10, shares={Category.MATH: 0.7, Category.REASONING: 0.6})
