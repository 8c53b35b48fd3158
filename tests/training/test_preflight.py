"""Preflight on realistic configurations: every silent misconfiguration is caught, a good pairing passes."""

from __future__ import annotations

import copy

import pytest
import torch
from realistic_configs import KIMI_TARGET, LLAMA_TARGET, altered, kimi_draft, llama_draft, server_info

from training.preflight import (
    check_algorithm,
    check_aux_layers,
    check_context,
    check_dtype,
    check_fc_input,
    check_lm_head,
    check_vocab,
    run_preflight,
    server_capture,
)


@pytest.mark.parametrize(("server", "draft", "target"), [
    ("llama31_8b_eagle3", llama_draft, LLAMA_TARGET),
    ("kimi_k2_eagle3", kimi_draft, KIMI_TARGET),
], ids=["llama-3.1-8b", "kimi-k2"])
def test_a_correct_pairing_passes_every_check(server: str, draft: object, target: dict) -> None:
    checks = run_preflight(server_info(server), draft(), target)  # type: ignore[operator]
    assert [c.name for c in checks] == ["algorithm", "fc_input", "lm_head", "aux_layers", "context", "dtype", "vocab"]
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_eagle_flag_with_an_eagle3_draft_is_the_trap_explained() -> None:
    check = check_algorithm(server_info("llama31_8b_eagle_flag"), llama_draft())
    assert not check.ok
    for words in ("1x hidden size instead of 3x", "fc layer", "skipped", "about 1.0 tokens", "EAGLE3"):
        assert words in check.detail


def test_a_server_without_speculation_fails() -> None:
    check = check_algorithm(server_info("llama31_8b_no_speculation"), llama_draft())
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


def test_sglang_reads_config_ids_with_either_rule() -> None:
    assert server_capture([1, 29, 57], 61) == ((2, 30, 58), (2, 30, 58))
    assert server_capture([2, 30, 58], 61) == ((3, 31, 59), (2, 30, 58))
    assert server_capture(None, 61) == ((2, 30, 58), (2, 30, 58))


def test_aux_ids_written_in_the_input_convention_are_the_plus_one_trap() -> None:
    # Kimi-K2 trained on the inputs of [2, 30, 58], but the config states [2, 30, 58] instead of [1, 29, 57].
    draft = kimi_draft()
    draft.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]
    check = check_aux_layers(draft, KIMI_TARGET)
    assert not check.ok
    assert "older servers add 1 (inputs of [3, 31, 59])" in check.detail and "[1, 29, 57]" in check.detail


def test_aux_ids_off_by_one_from_training_fail() -> None:
    draft = kimi_draft()
    draft.config["datahunt"]["aux_layer_ids_input_of_layer"] = [1, 29, 57]  # trained on output-of-layer tensors
    check = check_aux_layers(draft, KIMI_TARGET)
    assert not check.ok and "off-by-one" in check.detail


def test_aux_ids_beyond_the_target_fail() -> None:
    check = check_aux_layers(kimi_draft(), LLAMA_TARGET)  # a 61-layer draft on a 32-layer target
    assert not check.ok and "beyond a 32-layer target" in check.detail


def test_max_position_embeddings_below_the_serving_context_fails() -> None:
    draft = altered(kimi_draft(), max_position_embeddings=2048)
    check = check_context(server_info("kimi_k2_eagle3"), draft, KIMI_TARGET)
    assert not check.ok and "2048" in check.detail and "131072" in check.detail
    # Llama's server leaves context_length unset: the target's own 131072 is what it serves.
    assert not check_context(server_info("llama31_8b_eagle3"), altered(llama_draft(), max_position_embeddings=8192),
                             LLAMA_TARGET).ok


def test_dtype_mismatch_fails() -> None:
    draft = altered(llama_draft(), torch_dtype="float16")
    check = check_dtype(server_info("llama31_8b_eagle3"), draft, LLAMA_TARGET)  # server dtype auto -> bf16
    assert not check.ok and "float16" in check.detail and "bfloat16" in check.detail
    kimi = server_info("kimi_k2_eagle3")
    assert not check_dtype({**kimi, "dtype": "float16"}, kimi_draft(), KIMI_TARGET).ok


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


def test_ids_starting_below_one_cannot_be_made_version_proof_by_renaming() -> None:
    draft = kimi_draft()
    draft.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 29, 57]
    draft.config["datahunt"]["aux_layer_ids_input_of_layer"] = [1, 30, 58]
    check = check_aux_layers(draft, KIMI_TARGET)
    assert not check.ok and "pin the SGLang version" in check.detail
