"""The whole curation run on a small mirror: outputs, report, determinism, resume, failures, the split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.settings import get_settings
from core.types import Category
from curation.manifest import Budget, EvalSet, Manifest, Source, TargetModel
from curation.pipeline import curate
from curation.report import EvalSetStatus
from curation.staging import sample_id

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"
FILES = [
    "openai/gsm8k/train.jsonl",
    "openai/gsm8k/test.jsonl",
    "llamafactory/demo_data/alpaca_en_demo.json",
    "lmsys/fastchat_dummy_conversation/dummy_conversation.json",
    "llamafactory/demo_data/glaive_toolcall_en_demo.json",
    "SWE-agent/trajectories/pydicom__pydicom-1458.gpt4_default.traj",
]


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """A small mirror: real files, plus a file with planted problems and one written by the target."""
    root = tmp_path / "mirror"
    root.mkdir()
    (root / "MIRROR.json").write_text("[]")  # a mirror folder (a manifest's own mirror must be one)
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(MIRROR / name, root / name)
    test_question = json.loads((root / "openai/gsm8k/test.jsonl").read_text().splitlines()[3])["question"]
    alpaca = json.loads((root / FILES[2]).read_text())
    odd = [
        {"question": "Leaked: " + test_question, "answer": "42"},  # contaminated
        {
            "question": next(a["instruction"] for a in alpaca if not a["input"]).upper(),
            "answer": "copy",
        },  # re-cased
        {"question": "   ", "answer": "empty question"},
        {"question": "Count to three in words, please, for my daughter.", "answer": "one two three"},
    ]
    lines = [json.dumps(r).encode() for r in odd] + [b'{"question": "caf\xe9 au lait?", "answer": "x"}']
    (root / "local/odd").mkdir(parents=True)
    (root / "local/odd/rows.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    native = [
        {
            "conversations": [
                {"from": "human", "value": f"Say hello number {i} to the team."},
                {"from": "gpt", "value": f"Hello team, this is greeting {i}."},
            ]
        }
        for i in range(6)
    ]
    (root / "local/native").mkdir(parents=True)
    (root / "local/native/chats.json").write_text(json.dumps(native))
    return root


def _manifest(mirror: Path, **kwargs: object) -> Manifest:
    sources = [
        Source(
            hub_id="openai/gsm8k", config="main", data_files=[FILES[0]], category=Category.MATH, max_rows=80
        ),
        Source(
            hub_id="llamafactory/demo_data",
            config="alpaca_en_demo",
            data_files=[FILES[2]],
            category=Category.GENERAL_CHAT,
            max_rows=40,
        ),
        Source(
            hub_id="lmsys/fastchat-dummy-conversation",
            data_files=[FILES[3]],
            category=Category.GENERAL_CHAT,
            max_rows=60,
        ),
        Source(
            hub_id="llamafactory/demo_data",
            config="glaive",
            data_files=[FILES[4]],
            category=Category.TOOL_USE,
            max_rows=20,
        ),
        Source(
            hub_id="SWE-agent/trajectories", data_files=[FILES[5]], category=Category.AGENTIC_TRAJECTORIES
        ),
        Source(hub_id="local/odd", data_files=["local/odd/rows.jsonl"], category=Category.REASONING),
        Source(
            hub_id="local/native",
            data_files=["local/native/chats.json"],
            category=Category.GENERAL_CHAT,
            target_native=True,
        ),
    ]
    evals = [EvalSet(name="gsm8k-test", hub_id="openai/gsm8k", data_files=[FILES[1]])]
    return Manifest(sources=sources, eval_sets=evals, mirror=str(mirror), **kwargs)  # type: ignore[arg-type]


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_curate_writes_the_curated_set(mirror: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = curate(_manifest(mirror), out, settings=get_settings(), jsonl=True).report
    assert report.rows_in == 80 + 40 + 60 + 20 + 1 + 5 + 6
    assert report.drops["invalid_utf8"] == 1 and report.drops["empty_turn"] == 1
    assert report.duplicates.exact >= 20  # the dummy conversations repeat, plus the re-cased copy
    duplicates = [json.loads(line) for line in (out / "dropped/duplicates.jsonl").read_text().splitlines()]
    recased = sample_id(_manifest(mirror).sources[5], 1)
    assert any(d["id"] == recased and d["kind"] == "exact" for d in duplicates)
    assert report.decontaminated == 1
    leaked = [json.loads(line) for line in (out / "decontaminated.jsonl").read_text().splitlines()]
    assert leaked[0]["eval_item"] == "gsm8k-test#3" and leaked[0]["source"] == "local/odd"
    assert report.target_native == 6
    assert report.needs_regeneration == report.rows_out - 6
    assert report.per_source["local/odd"].drops == {"empty_turn": 1, "invalid_utf8": 1}
    dropped = (out / "dropped").glob("local_odd-*.jsonl")
    reasons = [json.loads(line)["reason"] for path in dropped for line in path.read_text().splitlines()]
    assert sorted(reasons) == ["empty_turn", "invalid_utf8"]
    for name in ("report.json", "summary.md", "mix.png", "samples.jsonl", "data/shard-00000.parquet"):
        assert (out / name).is_file(), name
    assert "## Drops by reason" in (out / "summary.md").read_text()
    assert (out / "mix.png").read_bytes()[:4] == b"\x89PNG"
    rows = pq.read_table(out / "data/shard-00000.parquet").to_pylist()
    assert len(rows) == report.rows_out
    regen = [r for r in rows if r["needs_regeneration"]]
    # The dataset's answers are gone; an assistant turn that called tools stays as its calls (no text), the
    # recording per-turn regeneration checks the target's own calls against.
    assert all(m["role"] != "assistant" or (m["tool_calls"] and m["content"] == "") for r in regen
               for m in r["messages"])
    assert all(any(m["role"] == "assistant" for m in r["original_messages"]) for r in regen)
    native = [r for r in rows if not r["needs_regeneration"]]
    assert len(native) == 6 and all(r["messages"][-1]["role"] == "assistant" for r in native)
    swe = next(r for r in rows if r["source"]["dataset"] == "SWE-agent/trajectories")
    assert swe["category"] == "agentic_trajectories" and swe["source"]["row"] == 0
    assert set(rows[0]) >= {
        "id",
        "messages",
        "needs_regeneration",
        "category",
        "source",
        "content_hash",
        "token_count",
    }


def test_same_manifest_and_seed_give_identical_bytes(mirror: Path, tmp_path: Path) -> None:
    manifest = _manifest(mirror, budget=Budget(total=60, shares={Category.MATH: 0.5}, seed=3))
    curate(manifest, tmp_path / "a", settings=get_settings(), jsonl=True)
    curate(manifest, tmp_path / "b", settings=get_settings(), jsonl=True)
    first, second = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []
    other = curate(manifest, tmp_path / "c", settings=get_settings(), seed=4).report
    assert other.per_category["math"].selected == 30
    assert _files(tmp_path / "c")["data/shard-00000.parquet"] != first["data/shard-00000.parquet"]


def test_rerun_resumes_and_budget_change_reuses_stages(mirror: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = _manifest(mirror)  # one manifest: its creation time is kept beside the set (manifest.json)
    first = curate(manifest, out, settings=get_settings())
    assert first.reused == []
    before = _files(out)
    again = curate(manifest, out, settings=get_settings())
    assert "final" in again.reused and len(again.reused) == 8
    assert _files(out) == before
    budgeted = curate(_manifest(mirror, budget=Budget(total=20)), out, settings=get_settings())
    assert "final" not in budgeted.reused and len(budgeted.reused) == 7
    unmet = sum(budgeted.report.unmet_budgets.values())
    assert unmet > 0 and budgeted.report.rows_out == 20 - unmet


def test_failed_source_and_bad_mapping_are_reported(mirror: Path, tmp_path: Path) -> None:
    manifest = _manifest(mirror)
    manifest.sources.append(
        Source(hub_id="gone/missing", data_files=["gone/x.jsonl"], category=Category.MATH)
    )
    manifest.sources.append(
        Source(
            hub_id="openai/gsm8k",
            config="mapped",
            data_files=[FILES[0]],
            category=Category.MATH,
            field_mapping={"question": "prompt_text"},
        )
    )
    report = curate(manifest, tmp_path / "out", settings=get_settings()).report
    assert report.failed_sources == ["gone/missing", "openai/gsm8k:mapped"]
    assert "mirror files missing" in report.per_source["gone/missing"].error
    assert "columns are ['answer', 'question']" in report.per_source["openai/gsm8k:mapped"].error
    assert report.rows_out > 100


@pytest.mark.slow
def test_target_native_rows_get_ids_and_loss_mask(mirror: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "<", ">", "/", "user", "assistant", "s", "Say", "hello", "Hello", "team", ",", "."]
    core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} </s> {% endfor %}"
    tokenizer.save_pretrained(tmp_path / "tok")
    manifest = _manifest(mirror, target=TargetModel(model=str(tmp_path / "tok")))
    report = curate(manifest, tmp_path / "out", settings=get_settings()).report
    assert report.token_counter == str(tmp_path / "tok")
    rows = pq.read_table(tmp_path / "out/data/shard-00000.parquet").to_pylist()
    native = [r for r in rows if r["target_native"]]
    assert native and all(len(r["input_ids"]) == len(r["loss_mask"]) for r in native)
    first = native[0]
    assert first["input_ids"][:3] == [1, 4, 2]  # "<user>"
    assert 0 < sum(first["loss_mask"]) < len(first["loss_mask"])
    assert all(r["input_ids"] is None for r in rows if r["needs_regeneration"])


def test_sources_without_files_are_found_in_the_mirror(tmp_path: Path) -> None:
    # A manifest exported from the catalog names Hub ids only; the mirror's MIRROR.json supplies the files.
    manifest = Manifest(
        sources=[
            Source(hub_id="openai/gsm8k", config="main", category=Category.MATH, format="qa", max_rows=50)
        ],
        eval_sets=[EvalSet(name="gsm8k-test", hub_id="openai/gsm8k", config="main", split="test")],
    )
    report = curate(manifest, tmp_path / "out", settings=get_settings(), mirror=MIRROR).report
    assert report.failed_sources == [] and report.rows_in == 50
    assert report.eval_sets["gsm8k-test"] == EvalSetStatus(items=400, error=None)
    # The mirror's own eval entries are always added to the manifest's.
    assert report.eval_sets["openai/openai_humaneval"] == EvalSetStatus(items=164, error=None)
    offline = curate(manifest, tmp_path / "out2", settings=get_settings()).report  # no mirror anywhere, offline
    assert (
        "not in a local mirror and datahunt is offline" in offline.per_source["openai/gsm8k:main"].error
    )
    assert offline.eval_sets["gsm8k-test"].unavailable and not offline.eval_sets["gsm8k-test"].error


def test_rerun_reuses_a_stage_whose_rows_hold_line_separators(tmp_path: Path) -> None:
    # GSM8K holds U+2028: a staged cache read back with str.splitlines() cut such rows in two and crashed
    root = tmp_path / "mirror" / "local" / "seps"
    root.mkdir(parents=True)
    (tmp_path / "mirror" / "MIRROR.json").write_text("[]")
    rows = [{"question": f"Line one\u2028line two\u2029{i} and\rmore?", "answer": f"yes {i}"} for i in range(5)]
    (root / "rows.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    source = Source(hub_id="local/seps", data_files=["local/seps/rows.jsonl"], category=Category.MATH)
    manifest = Manifest(sources=[source], mirror=str(tmp_path / "mirror"))
    out = tmp_path / "out"
    first = curate(manifest, out, settings=get_settings(), jsonl=True)
    again = curate(manifest.model_copy(update={"budget": Budget(total=4)}), out, settings=get_settings(), jsonl=True)
    assert again.reused == ["stage:local/seps"] and again.report.rows_out == 4
    samples = (out / "samples.jsonl").read_text().split("\n")
    texts = {json.loads(line)["messages"][-1]["content"] for line in samples if line}
    assert first.report.rows_out == 5 and all("\u2028" in t and "\u2029" in t for t in texts)


def test_the_hub_is_probed_only_for_a_source_the_mirror_lacks(
    mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.settings import get_settings

    monkeypatch.delenv("DATAHUNT_OFFLINE")
    get_settings.cache_clear()
    asked: list[int] = []

    def probe() -> str | None:
        asked.append(1)
        return "ConnectError: refused"

    manifest = _manifest(mirror)
    assert curate(manifest, tmp_path / "a", settings=get_settings(), hub_probe=probe).report.failed_sources == []
    assert asked == []
    manifest.sources += [Source(hub_id=f"gone/d{i}", category=Category.MATH) for i in range(2)]
    manifest.sources.append(Source(hub_id="gone/d2", category=Category.CODE_REVIEW))
    report = curate(manifest, tmp_path / "b", settings=get_settings(), hub_probe=probe).report
    assert asked == [1] and report.failed_sources == ["gone/d0", "gone/d1", "gone/d2"]
    assert "code_review has approved sources but no rows in the mix" in " ".join(report.warnings)
    assert "## Warnings" in (tmp_path / "b" / "summary.md").read_text()
    assert "not in the mirror and the Hub is unreachable (ConnectError: refused)" in (
        report.per_source["gone/d2"].error
    )
