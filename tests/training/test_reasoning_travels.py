"""The reasoning mode travels regen → train → eval, so all three render the same way (issue #43, part 2).

A tiny Llama target whose chat template writes a marker word when the template is told not to think
(`enable_thinking` false) and another when told to think: regeneration in process with `--reasoning
served-off` renders its prompts with the switch and records the mode on every row; `train` renders the rows the
same way, records it beside the run and in the exported draft; `eval-accept` renders its prompts as the draft
records, unless told otherwise. A run asked to render rows another way than they were made is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tiny_models import make_llama, make_tokenizer
from typer.testing import CliRunner

from server.cli import app

OFF, ON = "w198", "w199"  # the words the template writes for thinking off / on
SWITCH = ("{% if enable_thinking is defined and not enable_thinking %}" + OFF + " {% endif %}"
          "{% if enable_thinking is defined and enable_thinking %}" + ON + " {% endif %}")
# As a thinking model's template: the switch's mark opens every answer, the one asked for and those in history.
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {% if m['role'] == 'assistant' %}" + SWITCH +
            "{% endif %}{{ m['content'] }} <|end|> {% endfor %}{% if add_generation_prompt %}<|assistant|> " +
            SWITCH + "{% endif %}")
runner = CliRunner()


@pytest.fixture(scope="module")
def switch_target(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    tokenizer = make_tokenizer()
    tokenizer.chat_template = TEMPLATE
    folder = tmp_path_factory.mktemp("switch-target")
    make_llama(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, tokenizer


def test_served_off_travels_from_regen_to_train_to_eval(switch_target: tuple[Path, Any], tmp_path: Path) -> None:
    from server.commands.eval_accept import _eval_rendering
    from training.eval_prompts import encode_prompt

    target, tokenizer = switch_target
    rows = [{"id": f"r{i}", "messages": [{"role": "user", "content": f"w{i} w{i + 1} w{i + 2}"}]} for i in range(6)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    regen = runner.invoke(app, ["regen", "--api", "local", "--model", str(target),
                                "--input", str(tmp_path / "in.jsonl"),
                                "--out", str(tmp_path / "run"), "--reasoning", "served-off", "--max-tokens", "8",
                                "--temperature", "0", "--no-progress"])
    assert regen.exit_code == 0, regen.output
    made = [json.loads(line) for line in (tmp_path / "run" / "regenerated.jsonl").read_text().splitlines()]
    assert {r["meta"]["reasoning"] for r in made} == {"served-off"}
    # <bos> <|user|> w w w <|end|> <|assistant|> w198: the prompt the target answered carried the switch's mark
    assert {r["meta"]["turns"][0]["prompt_tokens"] for r in made} == {8}
    assert json.loads((tmp_path / "run" / "run.json").read_text())["reasoning"] == "served-off"

    train = runner.invoke(app, ["train", "--data", str(tmp_path / "run"), "--target", str(target), "--out",
                                str(tmp_path / "draft"), "--steps", "2", "--draft-vocab-size", "50", "--device", "cpu"])
    assert train.exit_code == 0, train.output
    assert json.loads((tmp_path / "draft" / "rendering.json").read_text())["reasoning"] == "served-off"
    export = tmp_path / "draft" / "export"
    config = json.loads((export / "config.json").read_text())
    assert config["datahunt"]["rendering"] == {"reasoning": "served-off", "tool_rendering": "native"}

    rendering = _eval_rendering(export, None, None)
    prompt = {"conversations": [{"role": "user", "content": "w3 w4"}]}
    ids = encode_prompt(tokenizer, prompt, rendering)
    assert tokenizer.convert_tokens_to_ids(OFF) in ids and tokenizer.convert_tokens_to_ids(ON) not in ids
    assert tokenizer.convert_tokens_to_ids(ON) in encode_prompt(tokenizer, prompt,
                                                                _eval_rendering(export, "served-on", None))
    (tmp_path / "p.jsonl").write_text(json.dumps(prompt) + "\n")
    evaluated = runner.invoke(app, ["eval-accept", "--draft", str(export), "--target", str(target), "--prompts",
                                    str(tmp_path / "p.jsonl"), "--steps", "2", "--max-new", "4"])
    assert evaluated.exit_code == 0, evaluated.output

    other = runner.invoke(app, ["train", "--data", str(tmp_path / "run"), "--target", str(target), "--out",
                                str(tmp_path / "other"), "--steps", "1", "--draft-vocab-size", "50", "--device", "cpu",
                                "--reasoning", "served-on"])
    assert other.exit_code == 1 and "served-off (6 rows)" in other.output
