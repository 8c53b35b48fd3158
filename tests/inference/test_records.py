"""Input loading: JSONL and Parquet, curated folders, stable ids, duplicate handling, prompt extraction."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inference.records import InputError, PromptError, content_id, input_files, load_rows, user_turns


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


MSGS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def test_rows_without_id_get_a_stable_content_hash(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "in.jsonl",
                  [{"messages": MSGS}, {"id": "a", "messages": MSGS, "needs_regeneration": False}])
    rows, dupes = load_rows(path)
    assert rows[0].id == content_id(MSGS) and rows[0].id.startswith("h")
    assert rows[1].id == "a" and rows[1].needs_regeneration is False
    assert dupes == 0
    again, _ = load_rows(path)
    assert again[0].id == rows[0].id


def test_identical_duplicates_are_counted_and_conflicting_ids_refused(tmp_path: Path) -> None:
    rows, dupes = load_rows(_jsonl(tmp_path / "d.jsonl", [{"messages": MSGS}, {"messages": MSGS}]))
    assert len(rows) == 1 and dupes == 1
    other = [{"role": "user", "content": "other"}]
    with pytest.raises(InputError, match="appears twice"):
        load_rows(_jsonl(tmp_path / "c.jsonl", [{"id": "x", "messages": MSGS}, {"id": "x", "messages": other}]))


def test_curated_folder_with_parquet_shards(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    table = pa.Table.from_pylist(
        [{"id": f"p{i}", "messages": MSGS, "needs_regeneration": True, "category": "math"} for i in range(3)]
    )
    pq.write_table(table, tmp_path / "data" / "train-00000.parquet")
    assert [p.name for p in input_files(tmp_path)] == ["train-00000.parquet"]
    rows, _ = load_rows(tmp_path)
    assert [r.id for r in rows] == ["p0", "p1", "p2"] and rows[0].category == "math"


def test_sharegpt_roles_are_normalised(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "s.jsonl",
                  [{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}])
    rows, _ = load_rows(path)
    assert rows[0].messages == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


def test_bad_input_gives_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_rows(tmp_path / "missing.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"messages": []}\nnot json\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:2"):
        load_rows(tmp_path / "bad.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no data"):
        load_rows(tmp_path / "empty")


def test_user_turns_keep_system_and_drop_dataset_answers() -> None:
    system, users = user_turns(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"},
         {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]
    )
    assert system == "S" and users == ["u1", "u2"]
    with pytest.raises(PromptError, match="no user turn"):
        user_turns([{"role": "assistant", "content": "a"}])
    with pytest.raises(PromptError, match="unsupported role 'function'"):
        user_turns([{"role": "user", "content": "u"}, {"role": "function", "content": "{}"}])
