"""docs/quickstart.md, run as a new reader runs it: its command block in a fresh shell exactly as written (no
virtual environment activated beforehand, no variable the page does not export), at toy sizes, with the tests'
trimmed mirror and a tiny random Llama standing in for SmolLM2 (`quickstart_page` says what the toy run
changes). Any step that exits non-zero fails the test, and every step ends with a `next:` line naming what
takes its output, so a reader who follows the hints walks the same path. Each step's wall time is printed;
`benchmarks/quickstart_times.py` re-measures the page's own table at the page's sizes.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from quickstart_page import (  # pytest puts this folder on the path
    PAGE,
    page_blocks,
    prepare_workdir,
    run_page,
)

ROOT = Path(__file__).resolve().parents[2]


def _tiny_target(folder: Path) -> None:
    spec = importlib.util.spec_from_file_location("tiny_models_quickstart", ROOT / "tests/training/tiny_models.py")
    assert spec and spec.loader
    tiny: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    tokenizer = tiny.make_tokenizer()
    tiny.make_llama(len(tokenizer), layers=8).save_pretrained(folder)  # default aux layers [2, 4, 5]: distinct
    tokenizer.save_pretrained(folder)


def test_the_page_installs_with_make_and_activates_the_environment_it_made() -> None:
    install, commands = page_blocks(PAGE.read_text(encoding="utf-8"))
    assert install == ["make install"]
    makefile = (ROOT / "Makefile").read_text()
    assert "\ninstall: $(VENV)/.installed-all" in makefile and "-c constraints.txt" in makefile
    assert commands[0] == "source .venv/bin/activate"  # a fresh shell has no `datahunt` on its PATH
    assert commands[1].startswith("export DATAHUNT_OFFLINE=1 DATAHUNT_MIRROR=")
    assert any(line.startswith("datahunt eval-accept") for line in commands)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_quickstart_runs_in_a_fresh_shell_at_toy_sizes(tmp_path: Path) -> None:
    prepare_workdir(tmp_path)
    _tiny_target(tmp_path / "targets" / "smollm2")
    steps = run_page(tmp_path, toy=True, timeout_s=840)
    _, commands = page_blocks(PAGE.read_text(encoding="utf-8"))
    print("\n".join(f"{s.number:>2}  {s.seconds:7.1f} s  {s.line}" for s in steps))
    for step in steps:
        assert step.code is None, (step.line, step.code, step.output[-3000:])
    assert len(steps) == len(commands), [s.line for s in steps]

    said = {step.line.split()[1] if step.line.startswith("datahunt ") else step.line: step.output for step in steps}
    for step in steps:
        if step.line.startswith("datahunt ") and not step.line.startswith("datahunt target prepare"):
            assert "next:" in step.output, (step.line, step.output[-2000:])
    serve = said["serve"]
    assert "#token=" in serve and "@@api 422" in serve, serve[-2000:]  # the page's buttons are not refused
    assert "next: review with `datahunt serve`" in said["campaign"]
    assert "next: datahunt curate --manifest" in said["manifest"]
    assert "next: datahunt regen --input curated" in said["curate"]
    assert "next: datahunt train --data runs/r1" in said["regen"]
    assert "next: datahunt eval-accept --draft" in said["train"]
    assert "--speculative-algorithm EAGLE3" in said["sglang-command"]
    regenerated = (tmp_path / "runs/r1/regenerated.jsonl").read_text().splitlines()
    assert len(regenerated) == 6 and all(json.loads(row)["conversations"] for row in regenerated)
    config = json.loads((tmp_path / "drafts/d1/export/config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert "datahunt" in (tmp_path / "runs/r1-hub/README.md").read_text()
    assert (tmp_path / ".datahunt" / "catalog.db").is_file()
