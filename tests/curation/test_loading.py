"""Loading through `datasets` from the mirror and from a Hub-like folder, and the record reader's fallbacks."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.loading import INVALID_UTF8, SourceLoadError, iter_records, plan_load, read_records

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def _plan(files: list[str], **kwargs: object) -> object:
    defaults = {"hub_id": "x/y", "config": None, "split": "train", "revision": None, "mirror": MIRROR, "offline": True}
    defaults.update(kwargs)
    return plan_load(data_files=files, **defaults)  # type: ignore[arg-type]


def test_mirror_jsonl_through_datasets(tmp_path: Path) -> None:
    records = list(iter_records(_plan(["openai/gsm8k/train.jsonl"]), cache_dir=tmp_path))  # type: ignore[arg-type]
    assert len(records) == 400
    first = json.loads((MIRROR / "openai/gsm8k/train.jsonl").read_text().splitlines()[0])
    assert records[0]["question"] == first["question"]


def test_mixed_shape_columns_are_decoded(tmp_path: Path) -> None:
    # SpecForge's turns differ in keys; datasets stores them as its Json feature and decodes on formatting.
    plan = _plan(["sgl-project/SpecForge/tool_use_conversation.jsonl"])
    record = next(iter(iter_records(plan, cache_dir=tmp_path)))  # type: ignore[arg-type]
    assert isinstance(record["conversations"][0], dict) and record["conversations"][0]["role"] == "system"


def test_mirror_csv_and_gz(tmp_path: Path) -> None:
    csv_rows = list(iter_records(_plan(["Maxscha/commitbench/samples_py.csv"]), cache_dir=tmp_path))  # type: ignore[arg-type]
    assert {"diff", "message", "hash"} <= set(csv_rows[0])
    gz_rows = list(iter_records(_plan(["openai/openai_humaneval/HumanEval.jsonl.gz"]), cache_dir=tmp_path))  # type: ignore[arg-type]
    assert len(gz_rows) == 164 and gz_rows[0]["task_id"] == "HumanEval/0"


def test_single_object_files_use_the_record_reader(tmp_path: Path) -> None:
    files = [
        "SWE-agent/trajectories/pydicom__pydicom-1458.gpt4_default.traj",
        "SWE-agent/trajectories/marshmallow-code__marshmallow-1867.function_calling_replace.traj",
    ]
    records = list(iter_records(_plan(files), cache_dir=tmp_path))  # type: ignore[arg-type]
    assert len(records) == 2 and all("history" in r for r in records)


def test_mismatched_schemas_fall_back_to_records(tmp_path: Path) -> None:
    # BFCL's multi-turn file has extra columns: datasets refuses one table, the reader yields every line.
    files = [
        "gorilla-llm/Berkeley-Function-Calling-Leaderboard/BFCL_v4_simple_python.json",
        "gorilla-llm/Berkeley-Function-Calling-Leaderboard/BFCL_v4_multi_turn_base.json",
    ]
    records = list(iter_records(_plan(files), cache_dir=tmp_path))  # type: ignore[arg-type]
    assert len(records) == 80
    assert any("initial_config" in r for r in records) and any("initial_config" not in r for r in records)


def test_invalid_utf8_line_becomes_a_marked_record(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"question": "ok", "answer": "1"}\n{"question": "caf\xe9", "answer": "2"}\n')
    records = list(iter_records(_plan([path.name], mirror=tmp_path), cache_dir=tmp_path / "c"))  # type: ignore[arg-type]
    assert records[0] == {"question": "ok", "answer": "1"}
    assert INVALID_UTF8 in records[1] and "line 2" in records[1][INVALID_UTF8]


def test_missing_files_and_offline_hub_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceLoadError, match="mirror files missing"):
        _plan(["nope/none.jsonl"])
    with pytest.raises(SourceLoadError, match="not in a local mirror and datahunt is offline"):
        plan_load(
            hub_id="a/b", data_files=[], config=None, split="train", revision=None, mirror=None, offline=True
        )


def test_streaming_threshold_and_flag() -> None:
    assert _plan(["openai/gsm8k/train.jsonl"]).streaming is False  # type: ignore[attr-defined]
    assert _plan(["openai/gsm8k/train.jsonl"], streaming=True).streaming is True  # type: ignore[attr-defined]


def test_hub_path_with_a_local_hub_like_repo(tmp_path: Path) -> None:
    # A folder laid out like a Hub dataset repo: README with configs, data files per split.
    repo = tmp_path / "hub" / "openai" / "gsm8k"
    (repo / "main").mkdir(parents=True)
    lines = (MIRROR / "openai/gsm8k/train.jsonl").read_text().splitlines()
    (repo / "main" / "train-00000.jsonl").write_text("\n".join(lines[:30]) + "\n")
    (repo / "main" / "test-00000.jsonl").write_text("\n".join(lines[30:40]) + "\n")
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
        "  - split: test\n    path: main/test-*\n---\n"
    )
    plan = plan_load(
        hub_id="openai/gsm8k",
        data_files=[],
        config="main",
        split="test",
        revision=None,
        mirror=None,
        offline=True,
        hub_root=tmp_path / "hub",
    )
    records = list(iter_records(plan, cache_dir=tmp_path / "cache"))
    assert len(records) == 10 and records[0]["question"] == json.loads(lines[30])["question"]
    streamed = plan_load(
        hub_id="openai/gsm8k",
        data_files=[],
        config="main",
        split="train",
        revision=None,
        mirror=None,
        offline=True,
        hub_root=tmp_path / "hub",
        streaming=True,
    )
    assert sum(1 for _ in iter_records(streamed, cache_dir=tmp_path / "cache")) == 30
    pinned_files = plan_load(
        hub_id="openai/gsm8k",
        data_files=["main/test-00000.jsonl"],
        config=None,
        split="train",
        revision=None,
        mirror=None,
        offline=True,
        hub_root=tmp_path / "hub",
    )
    assert len(list(iter_records(pinned_files, cache_dir=tmp_path / "cache"))) == 10


def test_read_records_json_list(tmp_path: Path) -> None:
    path = tmp_path / "l.json"
    path.write_text(json.dumps([{"a": 1}, {"a": 2}]))
    assert list(read_records(path)) == [{"a": 1}, {"a": 2}]


def test_invalid_utf8_in_csv_reaches_the_cleaning_step(tmp_path: Path) -> None:
    from curation.cleaning import CleaningConfig, StepParams, valid_utf8
    from curation.conversation import Row
    from curation.tokens import TokenCounter

    path = tmp_path / "commits.csv"
    path.write_bytes(b'diff,message\n"+ x = 1","fix caf\xe9"\n"+ y = 2","add y"\n')
    records = list(iter_records(_plan([path.name], mirror=tmp_path), cache_dir=tmp_path / "c"))  # type: ignore[arg-type]
    assert [r["message"][:3] for r in records] == ["fix", "add"]
    params = StepParams(CleaningConfig(), TokenCounter())
    rows = [
        Row(
            "a/b",
            i,
            [{"role": "user", "content": r["diff"]}, {"role": "assistant", "content": r["message"]}],
            "x",
        )
        for i, r in enumerate(records)
    ]
    assert valid_utf8(rows[0], params).reason == "invalid_utf8"  # type: ignore[union-attr]
    assert valid_utf8(rows[1], params) is rows[1]


def test_manifest_data_files_outside_the_mirror_are_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.jsonl").write_text("{}\n")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with pytest.raises(SourceLoadError, match="outside the mirror folder"):
        plan_load(hub_id="a/b", data_files=["../secret.jsonl"], config=None, split="train", revision=None,
                  mirror=mirror, offline=True)


def test_damaged_gzip_and_parquet_files_are_source_load_errors(tmp_path: Path) -> None:
    cut = tmp_path / "rows.jsonl.gz"
    cut.write_bytes(b"\x1f\x8b\x08\x00not really gzip")  # EOFError would reach the CLI as a bare "Aborted."
    with pytest.raises(SourceLoadError, match="not a readable gzip file"):
        list(read_records(cut))
    fake = tmp_path / "rows.parquet"
    fake.write_bytes(b"PAR1garbagePAR1")
    with pytest.raises(SourceLoadError, match="not a readable Parquet file"):
        list(read_records(fake))


def test_parquet_records_and_long_csv_fields_are_read(tmp_path: Path) -> None:
    pq.write_table(pa.table({"instruction": ["q1", "q2"], "output": ["a1", "a2"]}), tmp_path / "rows.parquet")
    assert list(read_records(tmp_path / "rows.parquet")) == [{"instruction": "q1", "output": "a1"},
                                                            {"instruction": "q2", "output": "a2"}]
    long_answer = "def f():\n    return 1\n" * 20_000  # 440 KB: over the csv module's default field limit
    with (tmp_path / "rows.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([["instruction", "output"], ["explain", long_answer]])
    assert [r["output"] for r in read_records(tmp_path / "rows.csv")] == [long_answer]
