"""The row contracts hold for what the stages really write: curated shards and regenerated journal lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from core.samples import CuratedSample, Message, RegeneratedSample, canonical_role
from core.settings import get_settings


def test_role_aliases_and_messages() -> None:
    assert canonical_role("gpt") == "assistant" and canonical_role("human") == "user"
    assert canonical_role("tool") == "tool"  # unknown names are left for the caller to refuse
    with pytest.raises(ValidationError):
        Message(role="tool", content="x")  # type: ignore[arg-type]


def test_the_curated_parquet_schema_is_the_curated_sample_model() -> None:
    from curation.shards import SCHEMA

    assert SCHEMA.names == list(CuratedSample.model_fields)


@pytest.mark.slow
def test_curated_rows_validate(tmp_path: Path) -> None:
    from core.jsonl import read_jsonl
    from core.types import Category
    from curation.manifest import Manifest, Source
    from curation.pipeline import curate

    mirror = Path(__file__).resolve().parents[1] / "data" / "mirror"
    manifest = Manifest(sources=[Source(hub_id="openai/gsm8k", config="main", category=Category.MATH, max_rows=10)],
                        mirror=str(mirror))
    curate(manifest, tmp_path / "out", settings=get_settings(), jsonl=True)
    rows = [CuratedSample.model_validate(r) for r in read_jsonl(tmp_path / "out" / "samples.jsonl")]
    assert len(rows) == 10 and all(r.needs_regeneration and r.messages[-1].role == "user" for r in rows)
    assert rows[0].source.dataset == "openai/gsm8k" and rows[0].original_messages[-1].role == "assistant"


def test_a_regenerated_row_needs_turns_with_known_roles() -> None:
    good = {"id": "r1", "conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "meta": {"regenerated": True}}
    assert RegeneratedSample.model_validate(good).conversations[1].content == "a"
    with pytest.raises(ValidationError, match="conversations"):
        RegeneratedSample.model_validate({"id": "r2", "conversations": [{"from": "gpt", "value": "a"}]})
