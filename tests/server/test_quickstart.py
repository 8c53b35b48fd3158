"""docs/quickstart.md, run end to end at toy sizes: the same commands in the same order, from the offline
campaign to `publish`, with the tests' trimmed mirror and a tiny random Llama instead of SmolLM2.

Each step's output must name what the next step takes (the `next:` lines), so a reader who follows the printed
hints walks the same path; the commands are read from the quickstart itself so the page cannot drift.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from core.settings import get_settings
from server.cli import app

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"
MIRROR = ROOT / "tests" / "data" / "mirror"
APPROVED = ("tatsu-lab/alpaca", "sahil2801/CodeAlpaca-20k", "anon8231489123/ShareGPT_Vicuna_unfiltered", "openai/gsm8k")


def _tiny_target(folder: Path) -> Path:
    spec = importlib.util.spec_from_file_location("tiny_models_quickstart", ROOT / "tests/training/tiny_models.py")
    assert spec and spec.loader
    tiny: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    tokenizer = tiny.make_tokenizer()
    tiny.make_llama(len(tokenizer), layers=8).save_pretrained(folder)  # default aux layers [2, 4, 5]: distinct
    tokenizer.save_pretrained(folder)
    return folder


def _commands() -> list[str]:
    """The `datahunt …` lines of the quickstart's code blocks, in order."""
    text = QUICKSTART.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = [line.split("  #", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith(("datahunt ", "make run"))]


TOY = {  # what the toy run changes in a quickstart line, by its command: smaller sizes, the tiny target
    "regen": ["--sample", "12", "--max-tokens", "8"],
    "train": ["--steps", "4", "--draft-vocab-size", "150", "--ttt-steps", "2"],
}


def _toy(line: str, target: Path) -> list[str]:
    words = line.replace("targets/smollm2", str(target)).split()[1:]
    command = words[0]
    for flag, value in zip(TOY.get(command, [])[::2], TOY.get(command, [])[1::2], strict=True):
        if flag in words:
            words[words.index(flag) + 1] = value
        else:
            words += [flag, value]
    return words


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_quickstart_runs_end_to_end_at_toy_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    torch.set_num_threads(1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATAHUNT_MIRROR", str(MIRROR))
    get_settings.cache_clear()
    target = _tiny_target(tmp_path / "tiny_target")
    lines = _commands()
    assert 12 <= len(lines) <= 18, lines
    assert lines[0] == "make run" and lines[-1].startswith("datahunt publish")
    runner = CliRunner()
    outputs: dict[str, str] = {}
    for line in lines:
        if line == "make run":  # what `make run` runs, in this process
            words = ["campaign", "run", "--offline"]
        elif line.startswith("datahunt target prepare"):  # the tiny target stands in for the prepared SmolLM2
            (tmp_path / "targets").mkdir(exist_ok=True)
            (tmp_path / "targets" / "smollm2").symlink_to(target)
            continue
        elif line.startswith("datahunt serve"):
            continue  # the review page has its own browser test; the quickstart approves on the command line too
        else:
            words = _toy(line, target)
        done = runner.invoke(app, words, catch_exceptions=False)
        assert done.exit_code == 0, (line, done.output[-3000:])
        outputs[words[0] if words[0] != "catalog" else f"catalog {words[1]}"] = done.output

    assert "next: review with `datahunt serve`" in outputs["campaign"]
    assert "next: datahunt curate --manifest" in outputs["manifest"]
    assert "next: datahunt regen --input curated" in outputs["curate"]
    assert "next: datahunt train --data runs/r1" in outputs["regen"]
    assert "next: datahunt eval-accept --draft" in outputs["train"]
    regenerated = [json.loads(r) for r in (tmp_path / "runs/r1/regenerated.jsonl").read_text().splitlines()]
    assert len(regenerated) == 12
    assert json.loads((tmp_path / "drafts/d1/export/config.json").read_text())["architectures"] == [
        "LlamaForCausalLMEagle3"]
    assert "--speculative-algorithm EAGLE3" in outputs["sglang-command"]
    card = next((tmp_path).glob("runs/r1-hub/README.md"))
    assert "datahunt" in card.read_text()
