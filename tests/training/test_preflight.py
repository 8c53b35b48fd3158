"""Preflight on realistic configurations: every silent misconfiguration is caught, a good pairing passes."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from realistic_configs import KIMI_TARGET, LLAMA_TARGET, altered, kimi_draft, llama_draft, recorded_server

from core.server_info import ServerInfo
from training.aux_layers import PlusOne, plus_one_rule, server_capture
from training.preflight import (
    check_algorithm,
    check_aux_layers,
    check_context,
    check_draft,
    check_dtype,
    check_fc_input,
    check_lm_head,
    check_vocab,
    run_preflight,
)

GEMMA3_TARGET = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "num_hidden_layers": 18}
QWEN3_TARGET = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 36}
GLM_LITE_TARGET = {"architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite", "num_hidden_layers": 47}
GPT_OSS_TARGET = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 24}


def _served_here(server: str, draft):  # type: ignore[no-untyped-def]
    """The draft as read from the folder the recorded server serves."""
    draft.folder = Path(str(recorded_server(server).speculative_draft_model_path))
    return draft


@pytest.mark.parametrize(("server", "draft", "target"), [
    ("llama31_8b_eagle3", llama_draft, LLAMA_TARGET),
    ("kimi_k2_eagle3", kimi_draft, KIMI_TARGET),
], ids=["llama-3.1-8b", "kimi-k2"])
def test_a_correct_pairing_passes_every_check(server: str, draft: object, target: dict) -> None:
    checks = run_preflight(recorded_server(server), _served_here(server, draft()), target)  # type: ignore[operator]
    assert [c.name for c in checks] == ["algorithm", "draft", "fc_input", "lm_head", "aux_layers", "context", "dtype",
                                        "vocab"]
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_eagle_flag_with_an_eagle3_draft_is_the_trap_explained() -> None:
    check = check_algorithm(recorded_server("llama31_8b_eagle_flag"), llama_draft())
    assert not check.ok
    for words in ("1x hidden size instead of 3x", "fc layer", "skipped", "about 1.0 tokens", "EAGLE3",
                  "target's lm_head", "ignore d2t"):
        assert words in check.detail


def _export(folder: Path, weights: bytes, **config: object) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], **config}))
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_the_server_must_serve_the_given_draft(tmp_path: Path) -> None:
    ours = _export(tmp_path / "ours", b"weights-a", hidden_size=64)
    draft = altered(llama_draft())
    draft.folder = ours
    same = check_draft(ServerInfo(speculative_draft_model_path=str(tmp_path / "x" / ".." / "ours")), draft)
    assert same.ok and "the given draft" in same.detail
    shutil.copytree(ours, tmp_path / "copy")
    copy_ok = check_draft(ServerInfo(speculative_draft_model_path=str(tmp_path / "copy")), draft)
    assert copy_ok.ok and "a copy of the given draft" in copy_ok.detail
    _export(tmp_path / "other", b"weights-b", hidden_size=64)
    other = check_draft(ServerInfo(speculative_draft_model_path=str(tmp_path / "other")), draft)
    assert not other.ok and str(tmp_path / "other") in other.detail and str(ours) in other.detail
    assert "weights differ" in other.detail and "config.json" not in other.detail.split("(")[1].split(";")[0]
    _export(tmp_path / "retuned", b"weights-a", hidden_size=128)
    assert "config.json differ" in check_draft(
        ServerInfo(speculative_draft_model_path=str(tmp_path / "retuned")), draft
    ).detail
    remote = check_draft(ServerInfo(speculative_draft_model_path="/elsewhere/draft"), draft)
    assert not remote.ok and "/elsewhere/draft" in remote.detail and str(ours) in remote.detail
    assert "cannot be read here" in remote.detail and hashlib.sha256(b"weights-a").hexdigest() in remote.detail
    assert not check_draft(recorded_server("llama31_8b_no_speculation"), draft).ok


def test_a_server_without_speculation_fails() -> None:
    check = check_algorithm(recorded_server("llama31_8b_no_speculation"), llama_draft())
    assert not check.ok and "without speculative decoding" in check.detail


def test_fc_not_reading_three_target_hidden_states_fails() -> None:
    draft = llama_draft()
    draft.shapes["fc.weight"] = (4096, 3 * 7168)  # a Kimi-K2 draft in front of Llama
    check = check_fc_input(draft, LLAMA_TARGET)
    assert not check.ok and "3 x 4096 = 12288" in check.detail


def test_missing_lm_head_fails() -> None:
    draft = llama_draft()
    del draft.shapes["lm_head.weight"]
    check = check_lm_head(draft)
    assert not check.ok and "1.00" in check.detail


def test_the_plus_one_rule_follows_the_targets_model_family() -> None:
    assert [plus_one_rule(t) for t in (LLAMA_TARGET, GEMMA3_TARGET, QWEN3_TARGET)] == [PlusOne.ALWAYS] * 3
    assert plus_one_rule(KIMI_TARGET) is PlusOne.IF_FIRST_IS_ONE  # Kimi-K2 runs on SGLang's DeepSeek-V3 model file
    assert plus_one_rule(GLM_LITE_TARGET) is PlusOne.IF_FIRST_IS_ONE
    assert plus_one_rule(GPT_OSS_TARGET) is PlusOne.UNLESS_MAX_IS_L
    assert plus_one_rule({"architectures": ["FalconForCausalLM"]}) is PlusOne.UNKNOWN
    assert server_capture([2, 30, 58], 61, PlusOne.ALWAYS) == (3, 31, 59)
    assert server_capture([1, 29, 57], 61, PlusOne.IF_FIRST_IS_ONE) == (2, 30, 58)
    assert server_capture([2, 30, 58], 61, PlusOne.IF_FIRST_IS_ONE) == (2, 30, 58)
    assert server_capture([1, 11, 24], 24, PlusOne.UNLESS_MAX_IS_L) == (1, 11, 24)
    assert server_capture([1, 11, 20], 24, PlusOne.UNLESS_MAX_IS_L) == (2, 12, 21)
    assert server_capture(None, 61, PlusOne.ALWAYS) == (2, 30, 58)


def test_input_convention_ids_are_the_plus_one_trap_on_llama_but_read_as_is_on_deepseek() -> None:
    # Trained on the inputs of [2, 16, 29], but the config states those ids instead of [1, 15, 28].
    llama = llama_draft()
    llama.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 16, 29]
    check = check_aux_layers(llama, LLAMA_TARGET)
    assert not check.ok and "inputs of layers [3, 17, 30]" in check.detail and "off-by-one" in check.detail
    # DeepSeek-V3's model file adds 1 only when the first id is 1: the same slip is read as meant.
    kimi = kimi_draft()
    kimi.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]
    assert check_aux_layers(kimi, KIMI_TARGET).ok


def test_aux_ids_off_by_one_from_training_fail() -> None:
    draft = kimi_draft()
    draft.config["datahunt"]["aux_layer_ids_input_of_layer"] = [1, 29, 57]  # trained on output-of-layer tensors
    check = check_aux_layers(draft, KIMI_TARGET)
    assert not check.ok and "off-by-one" in check.detail


def test_duplicate_aux_ids_are_refused() -> None:
    draft = llama_draft()
    draft.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 1, 28]
    draft.config["datahunt"]["aux_layer_ids_input_of_layer"] = [2, 2, 29]
    check = check_aux_layers(draft, LLAMA_TARGET)
    assert not check.ok and "2H features instead of 3H" in check.detail


def test_an_unknown_family_passes_only_when_every_known_rule_agrees() -> None:
    falcon = {"architectures": ["FalconForCausalLM"], "num_hidden_layers": 32}
    assert check_aux_layers(llama_draft(), falcon).ok  # ids [1, 15, 28]: +1 under every rule
    draft = llama_draft()
    draft.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 16, 29]
    check = check_aux_layers(draft, falcon)
    assert not check.ok and "FalconForCausalLM" in check.detail


def test_a_draft_for_another_target_depth_fails() -> None:
    check = check_aux_layers(kimi_draft(), LLAMA_TARGET)  # a 61-layer target's draft on a 32-layer target
    assert not check.ok and "trained on a 61-layer target and this target has 32 layers" in check.detail
    # A draft exported without the record (another tool, an older export): its ids still give it away.
    draft = kimi_draft()
    del draft.config["datahunt"]["target_num_hidden_layers"]
    check = check_aux_layers(draft, LLAMA_TARGET)
    assert not check.ok and "outside a 32-layer target" in check.detail
    # Ids that fit, but a depth that does not: only the record tells.
    shallow = llama_draft()
    shallow.config["datahunt"]["target_num_hidden_layers"] = 3
    assert not check_aux_layers(shallow, LLAMA_TARGET).ok


def test_max_position_embeddings_below_the_serving_context_fails() -> None:
    draft = altered(kimi_draft(), max_position_embeddings=2048)
    check = check_context(recorded_server("kimi_k2_eagle3"), draft, KIMI_TARGET)
    assert not check.ok and "2048" in check.detail and "131072" in check.detail
    # Llama's server leaves context_length unset: the target's own 131072 is what it serves.
    assert not check_context(recorded_server("llama31_8b_eagle3"), altered(llama_draft(), max_position_embeddings=8192),
                             LLAMA_TARGET).ok


def test_dtype_mismatch_fails() -> None:
    draft = altered(llama_draft(), torch_dtype="float16")
    check = check_dtype(recorded_server("llama31_8b_eagle3"), draft, LLAMA_TARGET)  # server dtype auto -> bf16
    assert not check.ok and "float16" in check.detail and "bfloat16" in check.detail
    kimi = recorded_server("kimi_k2_eagle3")
    assert not check_dtype(kimi.model_copy(update={"dtype": "float16"}), kimi_draft(), KIMI_TARGET).ok


def test_draft_vocab_for_another_tokenizer_fails() -> None:
    check = check_vocab(kimi_draft(), LLAMA_TARGET)
    assert not check.ok and "163840 is not the target's 128256" in check.detail
    assert "outside the target vocab" in check.detail


def test_d2t_out_of_range_or_inconsistent_fails() -> None:
    draft = llama_draft()
    draft.d2t = draft.d2t.clone()
    draft.d2t[-1] = 200000
    assert "outside the target vocab" in check_vocab(draft, LLAMA_TARGET).detail
    draft = copy.deepcopy(llama_draft())
    draft.t2d = torch.zeros(128256, dtype=torch.bool)
    draft.t2d[:32000] = True
    assert "disagree" in check_vocab(draft, LLAMA_TARGET).detail


def test_gpt_oss_ids_naming_the_last_layer_are_not_shifted() -> None:
    draft = llama_draft()
    del draft.config["datahunt"]["target_num_hidden_layers"]  # ids alone here: the rule, not the depth record
    draft.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 11, 24]
    draft.config["datahunt"]["aux_layer_ids_input_of_layer"] = [1, 11, 24]
    assert check_aux_layers(draft, GPT_OSS_TARGET).ok  # 24 = the last layer's output, captured as is
    draft.config["datahunt"]["aux_layer_ids_input_of_layer"] = [2, 12, 25]
    assert not check_aux_layers(draft, GPT_OSS_TARGET).ok
    draft.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 11, 20]
    draft.config["datahunt"]["aux_layer_ids_input_of_layer"] = [2, 12, 21]
    assert check_aux_layers(draft, GPT_OSS_TARGET).ok
    draft.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 15, 32]  # on llama, 33 does not exist
    draft.config["datahunt"]["aux_layer_ids_input_of_layer"] = [2, 16, 33]
    assert "outside a 32-layer target" in check_aux_layers(draft, LLAMA_TARGET).detail
