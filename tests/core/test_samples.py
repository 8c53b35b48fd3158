"""The row contracts hold for what the stages really write: curated shards and regenerated journal lines."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import TypeAdapter, ValidationError

from core.samples import ROLE_ALIASES, CuratedSample, Message, RegeneratedSample, canonical_role
from core.settings import get_settings

ROOT = Path(__file__).resolve().parents[2]


def test_role_aliases_and_messages() -> None:
    assert canonical_role("gpt") == "assistant" and canonical_role("human") == "user"
    assert canonical_role("Bard") == "assistant" and canonical_role("User") == "user"
    assert canonical_role("observer") == "observer"  # unknown names are left for the caller to refuse
    with pytest.raises(ValidationError):
        TypeAdapter(Message).validate_python({"role": "observer", "content": "x"})
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    assert TypeAdapter(Message).validate_python({"role": "assistant", "content": "", "tool_calls": [call]})
    assert TypeAdapter(Message).validate_python({"role": "tool", "content": "a.txt", "tool_call_id": "c1"})
    with pytest.raises(ValidationError):  # a call is OpenAI's shape, not a name alone
        TypeAdapter(Message).validate_python({"role": "assistant", "content": "", "tool_calls": [{"name": "ls"}]})
    with pytest.raises(ValidationError):  # no other key: a `from`/`value` turn is not a Message
        TypeAdapter(Message).validate_python({"role": "user", "content": "x", "from": "human"})


# One ShareGPT conversation with the speaker names datasets use, as every stage's reader meets it.
SHAREGPT_TURNS = [
    {"from": "system", "value": "Be brief."},
    {"from": "human", "value": "2+2?"},
    {"from": "bard", "value": "4"},
    {"from": "Human", "value": "and 3+3?"},
    {"from": "bot", "value": "6"},
]
EXPECTED = [("system", "Be brief."), ("user", "2+2?"), ("assistant", "4"), ("user", "and 3+3?"), ("assistant", "6")]


def test_every_reader_maps_the_same_aliases_through_the_one_table(tmp_path: Path) -> None:
    """Curation's ShareGPT adapter (a 13-entry table of its own), regeneration's and training's readers and
    the eval prompts of `eval-accept` each re-mapped `from`/`value`: `bot` was dropped by curation, `bard`
    refused by regeneration and training, and `eval-accept` lost every `value` and called the system a user."""
    from curation.adapters.chat import sharegpt
    from inference.records import normalise_messages
    from training.data import load_conversations
    from training.eval_prompts import prompt_turns

    curated = sharegpt({"conversations": SHAREGPT_TURNS})
    assert [(m["role"], m["content"]) for m in curated] == EXPECTED  # type: ignore[index]
    assert [(m["role"], m["content"]) for m in normalise_messages(SHAREGPT_TURNS)] == EXPECTED
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"id": "r", "conversations": SHAREGPT_TURNS}) + "\n", encoding="utf-8")
    assert [(t["role"], t["content"]) for t in load_conversations(path)[0][1]] == EXPECTED
    assert [(t["role"], t["content"]) for t in prompt_turns({"conversations": SHAREGPT_TURNS})] == EXPECTED[:2]


def test_the_role_table_and_the_roles_are_declared_once() -> None:
    """No module outside core/samples.py assigns a role set or a table mapping a speaker name to a role."""
    roles = {"system", "user", "assistant"}
    for folder in ("agents", "graph", "curation", "inference", "training", "server"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign | ast.AnnAssign):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    assert not any(isinstance(t, ast.Name) and t.id == "ROLES" for t in targets), path
                if isinstance(node, ast.Dict):
                    pairs = {(k.value, v.value) for k, v in zip(node.keys, node.values, strict=True)
                             if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
                    aliases = {(k, v) for k, v in pairs if k in ROLE_ALIASES and v in roles}
                    assert not aliases, (path, sorted(aliases))


def test_the_curated_parquet_schema_is_the_curated_sample_model() -> None:
    from curation.shards import SCHEMA

    assert SCHEMA.names == list(CuratedSample.model_fields)
    # the shards' bytes depend on this exact schema: derived from the model, it is what was written by hand
    call = pa.struct([("id", pa.string()), ("type", pa.string()),
                      ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
    turns = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(call)),
                                ("tool_call_id", pa.string())]))
    source = pa.struct([("dataset", pa.string()), ("config", pa.string()), ("split", pa.string()),
                        ("revision", pa.string()), ("row", pa.int64())])
    assert SCHEMA.equals(pa.schema([
        ("id", pa.string()), ("category", pa.string()), ("messages", turns), ("needs_regeneration", pa.bool_()),
        ("target_native", pa.bool_()), ("source", source), ("content_hash", pa.string()),
        ("token_count", pa.int64()), ("original_messages", turns), ("original_token_count", pa.int64()),
        ("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8())), ("tools", pa.string()),
    ]))


def test_a_field_added_to_the_contract_is_a_shard_column() -> None:
    """The schema is derived from the model, not restated: a new field becomes a column of its type."""
    from curation.shards import NARROW_FIELDS, model_schema

    class Extended(CuratedSample):
        language: str | None = None
        scores: list[int] | None = None

    schema = model_schema(Extended, NARROW_FIELDS)
    assert schema.names[-2:] == ["language", "scores"]
    assert schema.field("language").type == pa.string() and schema.field("scores").type == pa.list_(pa.int64())


def test_build_sample_returns_the_contract_and_refuses_a_row_that_breaks_it() -> None:
    from curation.conversation import Row, message
    from curation.manifest import Source
    from curation.samples import build_sample
    from curation.tokens import TokenCounter

    source = Source(hub_id="org/chat", category="general_chat")
    row = Row("org/chat", 3, [message("user", "hi"), message("assistant", "hello")], "general_chat")
    sample = build_sample(row, source, "s1", TokenCounter())
    assert isinstance(sample, CuratedSample) and sample.source.row == 3
    assert sample.messages == [{"role": "user", "content": "hi"}] and sample.needs_regeneration
    broken = Row("org/chat", 4, [message("human", "hi"), message("assistant", "hello")], "general_chat")
    with pytest.raises(ValidationError, match="role"):  # a role the cleaning step should have dropped
        build_sample(broken, source, "s2", TokenCounter())


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
    assert len(rows) == 10 and all(r.needs_regeneration and r.messages[-1]["role"] == "user" for r in rows)
    assert rows[0].source.dataset == "openai/gsm8k" and rows[0].original_messages[-1]["role"] == "assistant"


def test_a_regenerated_row_needs_turns_with_known_roles() -> None:
    good = {"id": "r1", "conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "meta": {"regenerated": True}}
    assert RegeneratedSample.model_validate(good).conversations[1]["content"] == "a"
    with pytest.raises(ValidationError, match="conversations"):
        RegeneratedSample.model_validate({"id": "r2", "conversations": [{"from": "gpt", "value": "a"}]})
