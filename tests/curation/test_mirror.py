"""The mirror: manifest from MIRROR.json (roles, categories, left-out entries) and trimming a mirror."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from core.types import Category
from curation.manifest import ManifestError
from curation.mirror import category_for, manifest_from_mirror, read_mirror_index, trim_mirror

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def test_shipped_mirror_matches_its_index() -> None:
    for entry in read_mirror_index(MIRROR):
        for name in entry["files"]:
            data = (MIRROR / name).read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry["sha256"][name], name
    total = sum(p.stat().st_size for p in MIRROR.rglob("*") if p.is_file())
    assert total < 8 * 1024 * 1024


def test_manifest_from_mirror_roles_and_categories() -> None:
    manifest = manifest_from_mirror(MIRROR, target="google/gemma-3-270m")
    keys = {s.key: s for s in manifest.sources}
    assert keys["openai/gsm8k:main"].category is Category.MATH
    assert keys["openai/gsm8k:main"].split == "train"
    assert keys["SWE-agent/trajectories"].category is Category.AGENTIC_TRAJECTORIES
    assert keys["llamafactory/demo_data:glaive_toolcall_en_demo"].category is Category.TOOL_USE
    assert keys["sahil2801/CodeAlpaca-20k:code_alpaca_2k"].category is Category.CODE_EXPLANATION
    assert keys["tatsu-lab/alpaca"].category is Category.GENERAL_CHAT
    names = {e.name for e in manifest.eval_sets}
    assert {
        "openai/openai_humaneval",
        "openai/gsm8k:main/test",
        "HuggingFaceH4/mt_bench_prompts:question",
    } <= names
    assert not any(s.hub_id == "openai/openai_humaneval" for s in manifest.sources)
    assert (
        manifest.budget.total is None and manifest.target and manifest.target.model == "google/gemma-3-270m"
    )
    assert any("possible_answer" in note for note in manifest.notes)


def test_category_rule_examples() -> None:
    assert category_for({"id": "Maxscha/commitbench", "files": []}) is Category.COMMIT_MESSAGES
    assert category_for({"id": "microsoft/CodeReviewer", "files": []}) is Category.CODE_REVIEW
    assert category_for({"id": "princeton-nlp/SWE-bench", "files": []}) is Category.BUG_FIXING
    assert category_for({"id": "someone/chitchat", "files": []}) is Category.GENERAL_CHAT


def test_not_a_mirror_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="not a mirror folder"):
        manifest_from_mirror(tmp_path)
    (tmp_path / "MIRROR.json").write_text("{oops")
    with pytest.raises(ManifestError, match="not valid JSON"):
        manifest_from_mirror(tmp_path)


@pytest.mark.parametrize("name", ["../outside.jsonl", "a/../../outside.jsonl", "/etc/passwd"])
def test_an_index_naming_a_file_outside_the_mirror_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "outside.jsonl").write_text('{"messages": [{"role": "user", "content": "secret"}]}\n')
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "MIRROR.json").write_text(json.dumps([{"id": "a/b", "files": [name]}]))
    with pytest.raises(ManifestError, match="lies outside the mirror folder"):
        manifest_from_mirror(mirror)


def test_unreadable_entries_are_left_out_with_a_note_and_empty_file_lists_refused(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00cut")
    good = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]
    (tmp_path / "a" / "b" / "ok.jsonl").write_text(json.dumps(good[0]) + "\n")
    entries = [{"id": "a/b", "files": ["a/b/x.jsonl.gz"]}, {"id": "n/o", "files": ["n/o/missing.jsonl"]},
               {"id": "a/c", "files": ["a/b/ok.jsonl"]}]
    (tmp_path / "MIRROR.json").write_text(json.dumps(entries))
    manifest = manifest_from_mirror(tmp_path)
    assert [s.hub_id for s in manifest.sources] == ["a/c"]
    assert any(n.startswith("left out a/b: cannot read a/b/x.jsonl.gz") and "gzip" in n for n in manifest.notes)
    assert any(n.startswith("left out n/o: cannot read n/o/missing.jsonl") for n in manifest.notes)
    (tmp_path / "MIRROR.json").write_text(json.dumps([{"id": "a/b", "files": []}]))
    with pytest.raises(ManifestError, match="non-empty list of paths"):
        manifest_from_mirror(tmp_path)


def test_a_link_in_the_mirror_leading_out_of_it_is_refused(tmp_path: Path) -> None:
    """A mirror's files stay inside it once links are resolved: a link leading out is named, never read."""
    store = tmp_path / "store"
    store.mkdir()
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
            for i in range(3)]
    (store / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    mirror = tmp_path / "mirror"
    (mirror / "a" / "b").mkdir(parents=True)
    (mirror / "a" / "b" / "chat.jsonl").symlink_to(store / "chat.jsonl")
    (mirror / "MIRROR.json").write_text(json.dumps([{"id": "a/b", "files": ["a/b/chat.jsonl"]}]))
    with pytest.raises(ManifestError, match="lies outside the mirror"):
        manifest_from_mirror(mirror)
    (mirror / "a" / "b" / "chat.jsonl").unlink()
    (mirror / "a" / "b" / "chat.jsonl").symlink_to(mirror / "a" / "real.jsonl")  # a link within it is fine
    (mirror / "a" / "real.jsonl").write_text((store / "chat.jsonl").read_text())
    assert [s.hub_id for s in manifest_from_mirror(mirror).sources] == ["a/b"]


def test_trim_mirror_keeps_formats(tmp_path: Path) -> None:
    entries = trim_mirror(MIRROR, tmp_path, max_rows=3)
    index = json.loads((tmp_path / "MIRROR.json").read_text())
    assert len(index) == len(entries)
    gsm = next(e for e in index if e["files"] == ["openai/gsm8k/train.jsonl"])
    assert gsm["rows"] == 3 and len((tmp_path / "openai/gsm8k/train.jsonl").read_text().splitlines()) == 3
    assert len(json.loads((tmp_path / "llamafactory/demo_data/alpaca_en_demo.json").read_text())) == 3
    assert (tmp_path / "Maxscha/commitbench/samples_py.csv").read_text().count("\n") >= 4
    traj = "SWE-agent/trajectories/pydicom__pydicom-1458.gpt4_default.traj"
    assert (tmp_path / traj).read_bytes() == (MIRROR / traj).read_bytes()
