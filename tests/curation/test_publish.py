"""Publishing: a curated or regenerated set as a Hub dataset folder that `datasets.load_dataset` reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import DatasetCard

from core.regenerated_set import finished_marker
from core.settings import get_settings
from core.types import Category
from curation.dataset_card import card_license, hub_license, size_category
from curation.manifest import Manifest, Source, dump_manifest
from curation.pipeline import curate
from curation.publish import PublishError, build_folder

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def curated_set(out: Path, *, alpaca_license: str = "CC BY-NC 4.0 (DATA_LICENSE)") -> Path:
    """Curate 20 GSM8K and 10 alpaca rows from the test mirror into `out`, with manifest.json as the CLI writes."""
    manifest = Manifest(
        sources=[
            Source(hub_id="openai/gsm8k", config="main", category=Category.MATH, max_rows=20, license="MIT"),
            Source(hub_id="tatsu-lab/alpaca", category=Category.GENERAL_CHAT, max_rows=10, license=alpaca_license),
        ],
        mirror=str(MIRROR),
    )
    curate(manifest, out, settings=get_settings())
    (out / "manifest.json").write_text(dump_manifest(manifest))
    return out


def _load(folder: Path, tmp_path: Path) -> object:
    import datasets

    return datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "hf-cache"))


def test_hub_license_ids_from_free_text() -> None:
    assert hub_license("CC BY-NC 4.0 (DATA_LICENSE)") == "cc-by-nc-4.0"
    assert hub_license("Apache-2.0 (FastChat repository license)") == "apache-2.0"
    assert hub_license("MIT") == "mit" and hub_license("Please follow OpenAI terms") is None
    assert card_license([{"license": "MIT"}, {"license": "MIT (SWE-agent repository license)"}]) == "mit"
    assert card_license([{"license": "MIT"}, {"license": "Apache 2.0"}]) == "other"
    assert card_license([{"license": None}]) == "unknown"
    assert size_category(30) == "n<1K" and size_category(12_000) == "10K<n<100K"


@pytest.mark.slow
def test_a_curated_set_loads_back_with_its_card(tmp_path: Path) -> None:
    src = curated_set(tmp_path / "curated")
    written = build_folder(src, tmp_path / "hub", repo_id="me/eagle-set", version="0.1.0",
                           accept_license_risk=True)
    assert written.kind == "curated" and written.rows == 30
    assert [p.name for p in written.shards] == ["train-00000-of-00001.parquet"]
    loaded = _load(tmp_path / "hub", tmp_path)
    assert loaded.num_rows == 30 and {"id", "messages", "category", "source"} <= set(loaded.column_names)
    assert sorted(set(loaded["category"])) == ["general_chat", "math"]
    card = DatasetCard.load(tmp_path / "hub" / "README.md")
    meta = card.data.to_dict()
    assert meta["license"] == "other" and meta["source_datasets"] == ["openai/gsm8k", "tatsu-lab/alpaca"]
    assert meta["configs"] == [{"config_name": "default", "data_files": [{"split": "train",
                                                                          "path": "data/train-*.parquet"}]}]
    assert meta["task_categories"] == ["text-generation"] and meta["datahunt"]["version"] == "0.1.0"
    assert "Some sources are non-commercial." in card.text and "(non-commercial)" in card.text
    assert "## Curation and decontamination" in card.text and "13-gram" in card.text
    assert "| [openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k) | main | not pinned | math | MIT | 20 |" in (
        card.text
    )


@pytest.mark.slow
def test_one_license_for_every_source_is_the_card_license(tmp_path: Path) -> None:
    src = curated_set(tmp_path / "curated", alpaca_license="MIT")
    build_folder(src, tmp_path / "hub", repo_id="me/eagle-set", version="0.1.0")
    card = DatasetCard.load(tmp_path / "hub" / "README.md")
    assert card.data.to_dict()["license"] == "mit" and "non-commercial" not in card.text


def _regeneration_run(run: Path, curated: Path) -> None:
    """A run folder as `datahunt regen` leaves it: two regenerated rows, one passed through, one failed."""
    run.mkdir()
    sampling = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 2048, "seed": 0}
    (run / "run.json").write_text(json.dumps({"input": str(curated), "endpoints": ["http://gpu1:30000"],
                                              "api": "openai", "model": "Qwen/Qwen3-8B", "sampling": sampling,
                                              "reasoning": "keep", "concurrency": 32}))
    rows = []
    for i, finish in enumerate(["stop", "length"]):
        rows.append({"id": f"r{i}", "conversations": [{"role": "user", "content": f"What is {i} + 1?"},
                                                       {"role": "assistant", "content": f"It is {i + 1}."}],
                     "meta": {"regenerated": True, "finish_reason": finish, "prompt_tokens": 9,
                              "completion_tokens": 5, "server": "http://gpu1:30000", "model": "Qwen/Qwen3-8B",
                              "sampling": sampling, "category": "math",
                              "source": {"dataset": "openai/gsm8k", "config": "main", "row": i}}})
    rows.append({"id": "n0",
                 "conversations": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                 "meta": {"regenerated": False, "category": "general_chat",
                          "source": {"dataset": "tatsu-lab/alpaca", "config": None, "row": 3}}})
    (run / "regenerated.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "errors.jsonl").write_text(json.dumps({"id": "f0", "error": "HTTP 400"}) + "\n")
    (run / "status.json").write_text(json.dumps({"quality": {"math": {"rows": 2, "cut_at_limit": 1, "cut_share": 0.5,
                                                                      "repetitive": 0, "repetition_share": 0.0}}}))
    (run / "finished.json").write_bytes(finished_marker(run))  # every row has its final record


def test_a_regenerated_run_loads_back_and_its_card_names_the_model_and_sampling(tmp_path: Path) -> None:
    curated = curated_set(tmp_path / "curated")
    _regeneration_run(tmp_path / "run", curated)
    written = build_folder(tmp_path / "run", tmp_path / "hub", repo_id="me/eagle-regen", version="0.1.0",
                           accept_license_risk=True)
    assert written.kind == "regenerated" and written.rows == 3
    loaded = _load(tmp_path / "hub", tmp_path)
    assert loaded["id"] == ["r0", "r1", "n0"] and loaded["regenerated"] == [True, True, False]
    assert loaded[1]["conversations"][1] == {"role": "assistant", "content": "It is 2."}
    assert json.loads(loaded[1]["meta"])["finish_reason"] == "length"
    card = DatasetCard.load(tmp_path / "hub" / "README.md")
    meta = card.data.to_dict()
    assert meta["datahunt"]["target_model"] == "Qwen/Qwen3-8B" and meta["datahunt"]["sampling"]["top_p"] == 0.95
    assert "synthetic" in meta["tags"] and meta["source_datasets"] == ["openai/gsm8k", "tatsu-lab/alpaca"]
    assert "failed and left out: 1; answers cut at the token limit: 1" in card.text
    assert "Decontamination:" in card.text  # from the curated set the run was made from


def test_a_folder_that_is_no_set_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PublishError, match="neither a curated set"):
        build_folder(tmp_path, tmp_path / "hub", repo_id="me/x", version="0")


def test_a_malformed_regenerated_row_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "regenerated.jsonl").write_text(json.dumps({"id": "x", "conversations": [{"from": "gpt", "value": "a"}]})
                                           + "\n")
    with pytest.raises(PublishError, match=r"regenerated\.jsonl:1: not a regenerated row \(conversations\.0\.role"):
        build_folder(run, tmp_path / "hub", repo_id="me/x", version="0")
