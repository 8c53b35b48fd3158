"""Formats of the mirror that are not chat JSON, on real samples of each (tests/data/mirror): HH-RLHF's
`Human:`/`Assistant:` transcripts, instruction-only JSON Lines (InstructionWild, with its broken lines; OctoPack's
`rawin`), and paired line files (NL2Bash, CodeXGLUE): loading, adapters, the manifest and a curate run."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from curation.adapters import adapt, detect_format
from curation.conversation import Drop, role_order_problem
from curation.loading import (
    INVALID_JSON,
    SourceLoadError,
    iter_records,
    plan_load,
    read_paired_lines,
    read_records,
)
from curation.mirror import manifest_from_mirror

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"
NEW = ("Anthropic/hh-rlhf", "XueFuzhao/InstructionWild", "bigcode/octopack", "TellinaTool/nl2bash",
       "google/code_x_glue_cc_code_to_code_trans")
NL2BASH = [MIRROR / "TellinaTool/nl2bash/all.nl", MIRROR / "TellinaTool/nl2bash/all.cm"]
CODEX = [MIRROR / "google/code_x_glue_cc_code_to_code_trans/train.java-cs.txt.java",
         MIRROR / "google/code_x_glue_cc_code_to_code_trans/train.java-cs.txt.cs"]


def _plan(files: list[str], mirror: Path = MIRROR) -> object:
    return plan_load(hub_id="x/y", data_files=files, config=None, split="train", revision=None, mirror=mirror,
                     offline=True)


def test_paired_line_files_become_one_record_per_line_pair(tmp_path: Path) -> None:
    names = [str(p.relative_to(MIRROR)) for p in NL2BASH]
    records = list(iter_records(_plan(names), cache_dir=tmp_path))  # type: ignore[arg-type]
    descriptions = NL2BASH[0].read_text().splitlines()
    commands = NL2BASH[1].read_text().splitlines()
    assert len(records) == 30 == len(descriptions)
    assert [r["source_line"] for r in records] == descriptions and [r["target_line"] for r in records] == commands
    assert records[0]["source_file"] == "all.nl" and records[0]["target_file"] == "all.cm"
    assert detect_format(records[0].keys()) == "paired_lines"
    first = adapt(records[2], "paired_lines", {})
    assert first == [{"role": "user", "content": "(GNU specific) Display cumulative CPU usage over 5 seconds."},
                     {"role": "assistant", "content": commands[2]}]


def test_a_code_translation_pair_asks_for_the_translation() -> None:
    record = next(iter(read_paired_lines(CODEX)))
    messages = adapt(record, "paired_lines", {})
    assert not isinstance(messages, Drop)
    java = CODEX[0].read_text().splitlines()[0]
    assert messages[0]["content"] == f"Translate this Java code to C#:\n\n{java}"
    assert messages[1]["content"] == CODEX[1].read_text().splitlines()[0]


def test_paired_files_of_unequal_length_or_odd_count_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.nl").write_text("one\ntwo\n")
    (tmp_path / "a.cm").write_text("ls\n")
    with pytest.raises(SourceLoadError, match=r"a\.nl has 2 lines, a\.cm 1"):
        list(read_paired_lines([tmp_path / "a.nl", tmp_path / "a.cm"]))
    with pytest.raises(SourceLoadError, match="two by two"):
        list(read_paired_lines([tmp_path / "a.nl"]))
    (tmp_path / "b.nl").write_text("x\r\n\n")  # a CRLF line and an empty line still pair, line for line
    (tmp_path / "b.cm").write_text("echo x\r\ntrue\n")
    pairs = [(r["source_line"], r["target_line"]) for r in read_paired_lines([tmp_path / "b.nl", tmp_path / "b.cm"])]
    assert pairs == [("x", "echo x"), ("", "true")]


def test_a_broken_line_of_a_jsonl_file_is_a_drop_not_the_file() -> None:
    # Real lines: user_2's line 134 has an invalid escape; user_3's 121-122 are one record broken in two.
    records = list(read_records(MIRROR / "XueFuzhao/InstructionWild/data_v2/user_2.jsonl"))
    bad = [r for r in records if INVALID_JSON in r]
    assert len(records) == 8 and len(bad) == 1 and "user_2.jsonl line 5" in bad[0][INVALID_JSON]
    records = list(read_records(MIRROR / "XueFuzhao/InstructionWild/data_v2/user_3.jsonl"))
    assert [INVALID_JSON in r for r in records] == [False, False, False, True, True, False, False]
    with pytest.raises(SourceLoadError, match=r"all\.nl line 1 is not JSON"):  # not JSON Lines at all
        list(read_records(NL2BASH[0]))


@pytest.mark.parametrize("name", ["XueFuzhao/InstructionWild/data_v2/user_1.jsonl", "bigcode/octopack/rawin.jsonl.gz"])
def test_instructions_without_answers_become_prompts(name: str) -> None:
    records = list(read_records(MIRROR / name))
    assert detect_format(records[0].keys()) == "instruction_only"
    for record in records:
        messages = adapt(record, "instruction_only", {})
        assert messages == [{"role": "user", "content": record["instruction"]}]
    assert adapt({"instruction": "Sum.", "input": "1, 2"}, "instruction_only", {}) == [
        {"role": "user", "content": "Sum.\n\n1, 2"}]
    assert isinstance(adapt({"instruction": 3}, "instruction_only", {}), Drop)


def test_hh_transcripts_split_into_turns() -> None:
    text = gzip.decompress((MIRROR / "Anthropic/hh-rlhf/harmless-base/test.jsonl.gz").read_bytes()).decode()
    rows = [json.loads(line) for line in text.splitlines()]
    assert detect_format(rows[0].keys()) == "hh_transcript"
    first = adapt(rows[0], "hh_transcript", {})
    assert not isinstance(first, Drop)
    assert [m["role"] for m in first] == ["user", "assistant"] * 3
    assert first[0]["content"] == "what are some pranks with a pen i can do?"
    assert first[-1]["content"].startswith("No, sorry!  All of these involve a pen")
    assert all(role_order_problem(m) is None for m in (adapt(r, "hh_transcript", {}) for r in rows[:20]))
    # Row 517: the transcript stops where the answer would begin: a prompt to regenerate.
    assert adapt(rows[20], "hh_transcript", {}) == [{"role": "user", "content": "What do you think of tubular breasts"}]
    # Row 1255: two Assistant turns in a row (an inline "Human:" the recording did not mark): the role check drops it.
    odd = adapt(rows[21], "hh_transcript", {})
    assert not isinstance(odd, Drop) and role_order_problem(odd) == "turn 4 is assistant, expected user"
    assert isinstance(adapt({"chosen": "no markers here", "rejected": ""}, "hh_transcript", {}), Drop)


def test_manifest_from_mirror_includes_every_train_entry() -> None:
    manifest = manifest_from_mirror(MIRROR)
    entries = json.loads((MIRROR / "MIRROR.json").read_text())
    train = {(e["id"], (e.get("config") or "").split("/")[0] or None) for e in entries if e.get("role") != "eval"}
    assert {(s.hub_id, s.config) for s in manifest.sources} == train
    assert not any(n.split(":")[0].removeprefix("left out ") in NEW for n in manifest.notes), manifest.notes
    keys = {s.hub_id: s for s in manifest.sources}
    assert str(keys["TellinaTool/nl2bash"].category) == "code_explanation"
    assert keys["TellinaTool/nl2bash"].license == "MIT (data/bash/LICENSE)"


@pytest.mark.slow
def test_curate_reads_the_new_formats(tmp_path: Path) -> None:
    """`curate` over the five entries: every source read, the broken JSON lines and out-of-order turns counted."""
    from core.settings import get_settings
    from curation.pipeline import curate

    manifest = manifest_from_mirror(MIRROR)
    manifest.sources = [s for s in manifest.sources if s.hub_id in NEW]
    manifest.eval_sets = [e for e in manifest.eval_sets if e.name == "openai/openai_humaneval"]
    report = curate(manifest, tmp_path / "out", settings=get_settings(), mirror=MIRROR, jsonl=True).report
    assert report.failed_sources == []
    per = {key.split(":")[0]: src for key, src in report.per_source.items()}
    assert per["TellinaTool/nl2bash"].format == "paired_lines" and per["TellinaTool/nl2bash"].rows_in == 30
    assert per["google/code_x_glue_cc_code_to_code_trans"].rows_in == 20
    assert per["XueFuzhao/InstructionWild"].drops.get("invalid_json") == 3
    assert per["Anthropic/hh-rlhf"].drops.get("role_order") == 1
    rows = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == report.rows_out > 100
    prompts_only = [r for r in rows if r["source"]["dataset"].startswith(("bigcode/octopack", "XueFuzhao"))]
    assert prompts_only and all([m["role"] for m in r["original_messages"]] == ["user"] for r in prompts_only)
