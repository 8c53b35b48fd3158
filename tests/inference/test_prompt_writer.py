"""Target-written prompts: the template's user-turn prefix, the quality filters, a resumable run through the local
backend and the HTTP backends, and the files it writes as a source that curation reads like any other."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from core.settings import get_settings
from inference.chat_template import TemplateError
from inference.generation import Sampling
from inference.local_backend import LocalTransformersBackend
from inference.openai_api import OpenAIChatBackend
from inference.prompt_writer import PrefixBackend, WriterConfig, prompt_problem, write_prompts
from inference.sglang_api import SGLangNativeBackend
from inference.template_prefix import TurnPrefix, user_turn_prefix
from tests.inference.regen_fake_server import FakeServer

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _tiny() -> Any:
    path = Path(__file__).resolve().parents[1] / "training" / "tiny_models.py"
    spec = importlib.util.spec_from_file_location("tiny_models_for_prompt_writer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    """A random tiny Llama whose head favours `<|end|>` (so written turns end) and its word-level tokenizer."""
    module = _tiny()
    tokenizer = module.make_tokenizer()
    model = module.make_llama(len(tokenizer), layers=2)
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tokenizer.convert_tokens_to_ids("<|end|>")] = 12.0
    model.lm_head = head
    return model, tokenizer


def test_prefix_is_cut_at_the_sentinel(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    assert user_turn_prefix(tokenizer) == TurnPrefix("<bos><|user|> ", "<|end|>")
    assert user_turn_prefix(tokenizer, CHATML) == TurnPrefix("<|im_start|>user\n", "<|im_end|>")
    with pytest.raises(TemplateError, match="verbatim"):
        user_turn_prefix(tokenizer, "{% for m in messages %}<|user|> {{ m['content'] | upper }} <|end|>{% endfor %}")
    with pytest.raises(TemplateError, match="cannot render"):
        user_turn_prefix(tokenizer, "{{ raise_exception('system turn required') }}")
    with pytest.raises(TemplateError, match="no user-turn opening or end"):
        user_turn_prefix(tokenizer, "{% for m in messages %}{{ m['content'] }}{% endfor %}")


@pytest.mark.parametrize(("text", "finish", "reason"), [
    ("", "stop", "empty"),
    ("How do I sort a dictionary by value in Python?", "length", "unfinished"),
    ("How do I sort this? <|end|> <|user|> and more", "stop", "template_leak"),
    ("Sort it.", "stop", "too_short"),
    ("help help help help help help help help me", "stop", "repetitive"),
    (" ".join(["why is the sky blue"] * 4), "stop", "repetitive"),
    ("How do I sort a dictionary by value in Python?", "stop", None),
])
def test_prompt_filters(text: str, finish: str, reason: str | None) -> None:
    assert prompt_problem(text, finish, ("<|end|>", "<|user|>"), min_words=4) == reason


def _config(out: Path, endpoints: list[str], **kwargs: Any) -> WriterConfig:
    return WriterConfig(out_dir=out, categories=["general_chat", "math"], per_category=6, endpoints=endpoints,
                        topics={"general_chat": ["w1 w2", "w3 w4"], "math": ["w5 w6 w7"]}, concurrency=4,
                        sampling=Sampling(temperature=1.0, top_p=1.0, max_tokens=8, seed=3), min_words=2, **kwargs)


def test_local_run_writes_sources_resumes_and_curates(tiny: tuple[Any, Any], tmp_path: Path) -> None:
    from curation.manifest import load_manifest
    from curation.pipeline import curate

    model, tokenizer = tiny
    out = tmp_path / "written"
    turn = user_turn_prefix(tokenizer)
    backend = PrefixBackend(LocalTransformersBackend(model, tokenizer, max_batch=8, gather_s=0.01), tokenizer, turn)
    summary, report = write_prompts(_config(out, []), backend)
    assert summary.done + summary.failed == 12
    for category, counts in report.per_category.items():
        assert counts["requested"] == 6 and counts["pending"] == 0
        assert counts["kept"] + sum(counts["drops"].values()) == 6, (category, counts)
        assert set(counts["drops"]) <= {"empty", "unfinished", "template_leak", "too_short", "repetitive",
                                        "duplicate", "failed"}
    assert report.kept > 0
    rows = [json.loads(line) for line in (out / "prompts/general_chat.jsonl").read_text().splitlines()]
    assert rows and all(r["messages"][0]["role"] == "user" and len(r["messages"]) == 1 for r in rows)
    assert {r["meta"]["topic"] for r in rows} <= {"w1 w2", "w3 w4"}
    texts = [r["messages"][0]["content"] for r in rows]
    assert len(set(texts)) == len(texts) and not any("<|" in t for t in texts)
    dropped = [json.loads(line) for line in (out / "dropped.jsonl").read_text().splitlines()]
    assert len(dropped) == sum(sum(c["drops"].values()) for c in report.per_category.values())
    # The seed topic was part of the prompt the model continued; request k was sampled with seed + k.
    requests = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert [r["id"] for r in requests][:2] == ["general_chat-00000", "general_chat-00001"]
    assert backend.prompt_text("w1 w2") == "<bos><|user|> Topic: w1 w2\n\n"

    # Run again: every request is already answered, nothing new is generated, the same files come out.
    before = (out / "prompts/general_chat.jsonl").read_bytes()
    again, report_again = write_prompts(_config(out, []), PrefixBackend(
        LocalTransformersBackend(model, tokenizer), tokenizer, turn))
    assert again.skipped == 12 and again.done == 0 and again.completion_tokens == 0
    assert (out / "prompts/general_chat.jsonl").read_bytes() == before
    assert report_again.per_category == report.per_category

    # A manifest beside the folder names the files as target-written sources: curated like any dataset.
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"schema_version": 1, "cleaning": {"min_tokens": 1}, "sources": [
        {"kind": "target-written", "path": f"written/prompts/{c}.jsonl", "category": c}
        for c in ("general_chat", "math")
    ]}))
    curated = curate(load_manifest(manifest), tmp_path / "curated", settings=get_settings(), sources_root=tmp_path)
    per_source = curated.report.per_source
    assert per_source["target-written/general_chat"].rows_in == report.per_category["general_chat"]["kept"]
    assert per_source["target-written/math"].kind == "target-written"
    assert curated.report.rows_out > 0


def test_http_backends_continue_the_prefix_with_stop_at_the_end_marker(tiny: tuple[Any, Any], tmp_path: Path) -> None:
    _, tokenizer = tiny
    turn = user_turn_prefix(tokenizer)
    server = FakeServer(tokenizer=tokenizer).start()
    try:
        for name, inner in (("openai", OpenAIChatBackend(model="target")),
                            ("sglang", SGLangNativeBackend(object(), model="target"))):  # type: ignore[arg-type]
            out = tmp_path / name
            summary, report = write_prompts(_config(out, [server.url]), PrefixBackend(inner, tokenizer, turn))
            assert summary.done == 12
            assert report.per_category["general_chat"]["kept"] == 2  # two topics: the rest are duplicates
            assert report.per_category["general_chat"]["drops"] == {"duplicate": 4}
            rows = [json.loads(line) for line in (out / "prompts/general_chat.jsonl").read_text().splitlines()]
            assert rows[0]["messages"][0]["content"] == "Please help me with this task: <unk> w1 w2 thanks"
    finally:
        server.stop()
    completions = [b for b in server.bodies if "prompt" in b]
    generates = [b for b in server.bodies if "input_ids" in b]
    assert len(completions) == len(generates) == 12
    expected = tokenizer("<bos><|user|> Topic: w1 w2\n\n", add_special_tokens=False)["input_ids"]
    assert completions[0]["prompt"] == expected and completions[0]["stop"] == ["<|end|>"]
    assert sorted(b["seed"] for b in completions) == sorted(3 + k for k in range(6) for _ in range(2))
    assert generates[0]["input_ids"] == expected and generates[0]["sampling_params"]["stop"] == ["<|end|>"]
    assert server.requests["/v1/completions"] == 12 and server.requests["/generate"] == 12


def test_cli_writes_prompts_and_adds_them_to_a_manifest(tiny: tuple[Any, Any], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from curation.manifest import load_manifest
    from server.cli import app

    _, tokenizer = tiny
    target = tmp_path / "target"
    tokenizer.save_pretrained(target)
    manifest = tmp_path / "manifest.json"
    server = FakeServer(tokenizer=tokenizer).start()
    try:
        args = ["write-prompts", "--target", str(target), "--server", server.url, "--categories", "math,code_review",
                "--per-category", "3", "--out", str(tmp_path / "tw"), "--manifest", str(manifest), "--no-progress",
                "--no-topics"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        # The bare prefix: the fake writes one message for all six requests, kept once over both categories.
        assert "math: 1 of 3 kept (dropped: duplicate 2)" in result.output
        assert "code_review: 0 of 3 kept (dropped: duplicate 3)" in result.output
        assert "1 target-written source(s)" in result.output
        sources = load_manifest(manifest).sources
        assert [(s.kind, s.path, s.key) for s in sources] == [
            ("target-written", "tw/prompts/math.jsonl", "target-written/math")]
        again = CliRunner().invoke(app, args)  # resumed: nothing new asked, the manifest entry replaced, not doubled
        assert again.exit_code == 0 and len(load_manifest(manifest).sources) == 1
        # The shipped seed topics, through this word-level tokenizer, are all <unk>: caught as repetitive.
        topics = CliRunner().invoke(app, [*args[:-1], "--out", str(tmp_path / "tw2")])
        assert topics.exit_code == 0 and "math: 0 of 3 kept (dropped: repetitive 3)" in topics.output
        assert server.requests["/v1/completions"] == 12
        bad = CliRunner().invoke(app, [*args[:6], "maths", *args[7:]])
        assert bad.exit_code == 2 and "unknown categories ['maths']" in bad.output
        (tmp_path / "lower.jinja").write_text("{% for m in messages %}{{ m['content'] | lower }}|{% endfor %}")
        refused = CliRunner().invoke(app, [*args, "--chat-template", str(tmp_path / "lower.jinja")])
        assert refused.exit_code == 2 and "does not render a user message verbatim" in refused.output
        assert "Traceback" not in bad.output + refused.output
    finally:
        server.stop()
