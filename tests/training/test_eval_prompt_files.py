"""`eval-accept` reads the prompt files of the field as they come (the mirror's own copies): EAGLE-bench and
MT-bench `turns`, SpecForge `id` + `conversations`, OpenAI `messages`; a bad file is refused before any model
loads, in one line naming the file and the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from server.cli import app
from training.data import DataError
from training.eval_prompts import prompt_turns, read_prompts

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"
EAGLE_BENCH = MIRROR / "SafeAILab/EAGLE-bench/gsm8k/question.jsonl"
MT_BENCH = MIRROR / "HuggingFaceH4/mt_bench_prompts/question.jsonl"
SPECFORGE = MIRROR / "sgl-project/SpecForge/tool_use_conversation.jsonl"
runner = CliRunner()


def openai_messages(folder: Path) -> Path:
    """The SpecForge rows as an OpenAI chat request file: `{"messages": [...]}` per line."""
    path = folder / "messages.jsonl"
    rows = [json.loads(line) for line in SPECFORGE.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps({"messages": r["conversations"]}) + "\n" for r in rows))
    return path


def test_each_format_gives_what_the_user_said_first() -> None:
    eagle = read_prompts(EAGLE_BENCH, limit=3)
    assert len(eagle) == 3 and prompt_turns(eagle[0]) == [{"role": "user", "content": eagle[0]["turns"][0]}]
    mt = read_prompts(MT_BENCH)
    assert len(mt) == 80 and all(len(r["turns"]) == 2 for r in mt)
    assert [t["role"] for t in prompt_turns(mt[0])] == ["user"]  # the second turn follows an answer not held
    specforge = read_prompts(SPECFORGE)
    assert [t["role"] for t in prompt_turns(specforge[0])] == ["system", "user"]  # cut before the assistant


@pytest.mark.slow
@pytest.mark.parametrize("name", ["eagle-bench", "mt-bench", "specforge", "openai"])
def test_eval_accept_measures_each_format(name: str, llama_dir: Path, tiny_draft: Path, tmp_path: Path) -> None:
    prompts = {"eagle-bench": EAGLE_BENCH, "mt-bench": MT_BENCH, "specforge": SPECFORGE,
               "openai": openai_messages(tmp_path)}[name]
    result = runner.invoke(app, ["eval-accept", "--draft", str(tiny_draft), "--target", str(llama_dir),
                                 "--prompts", str(prompts), "--limit", "2", "--steps", "2", "--max-new", "4"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[0])
    assert report["prompts"] == min(2, len(read_prompts(prompts))) and report["identical_to_target_greedy"]
    assert f"next: datahunt sglang-command --target {llama_dir} --draft {tiny_draft}" in result.stderr


def test_a_bad_row_is_refused_before_any_model_loads_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "held.jsonl"
    lines = [*EAGLE_BENCH.read_text().splitlines()[:2], '{"question_id": 9, "prompt": "no turns here"}']
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"{path}:3: a prompt row has neither 'text' nor user turns.*"
                                        r"\(its keys: prompt, question_id\)"):
        read_prompts(path)
    # No target or draft exists: had anything loaded first, the error would name them, not the row.
    result = runner.invoke(app, ["eval-accept", "--draft", str(tmp_path / "none"), "--target",
                                 str(tmp_path / "none"), "--prompts", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {path}:3: a prompt row has neither 'text' nor user turns: expected one "
                                     "of 'turns' (EAGLE-bench, MT-bench), 'conversations' (SpecForge, ShareGPT), "
                                     "'messages' (OpenAI), 'text' (its keys: prompt, question_id)")


@pytest.mark.parametrize(("text", "said"), [
    ('{"turns": "one string"}', "'turns' is not a list"),
    ('{"turns": []}', "neither 'text' nor user turns"),
    ('{"text": ""}', "'text' is not a non-empty string"),
    ('[1, 2]', "a prompt row is a JSON object, not list"),
    ('{"messages": [{"role": "assistant", "content": "hi"}]}', "neither 'text' nor user turns"),
    ('not json', "not valid JSON"),
])
def test_each_bad_shape_is_named(text: str, said: str, tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"turns": ["fine"]}\n' + text + "\n")
    with pytest.raises(DataError, match=r":2") as raised:
        read_prompts(path)
    assert said in str(raised.value)


def test_an_empty_or_missing_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="no prompts"):
        read_prompts(tmp_path / "empty.jsonl")
    with pytest.raises(DataError, match="does not exist"):
        read_prompts(tmp_path / "missing.jsonl")
