"""Export in SGLang's layout: config fields, a bit-exact round trip, and refusal of missing or mis-shaped keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from inference.decoding.draft_model import DraftConfig, Eagle3Draft
from inference.decoding.hidden_states import AuxLayers
from training.export import ExportError, export_draft, load_draft, write_export

CFG = DraftConfig(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=60, draft_vocab_size=40, target_hidden_size=24, max_position_embeddings=4096)
LAYERS = AuxLayers((2, 16, 29), "input")


def _draft() -> Eagle3Draft:
    torch.manual_seed(0)
    draft = Eagle3Draft(CFG)
    t2d = torch.zeros(60, dtype=torch.bool)
    t2d[10:50] = True
    draft.set_vocab(torch.full((40,), 10), t2d)
    return draft


def test_config_json_is_what_sglang_reads(tmp_path: Path) -> None:
    export_draft(_draft(), LAYERS, tmp_path, dtype="bfloat16")
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert (config["draft_vocab_size"], config["target_hidden_size"], config["vocab_size"]) == (40, 24, 60)
    assert config["max_position_embeddings"] == 4096 and config["torch_dtype"] == "bfloat16"
    assert config["num_hidden_layers"] == 1
    # Output-of-layer ids starting at 1: old and new SGLang both capture the inputs of [2, 16, 29].
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 15, 28]
    assert config["datahunt"]["aux_layer_ids_input_of_layer"] == [2, 16, 29]
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_slice("fc.weight").get_shape() == [32, 72]
        assert f.get_slice("lm_head.weight").get_shape() == [40, 32]
        assert f.get_tensor("d2t").dtype == torch.int64 and f.get_tensor("t2d").dtype == torch.bool
    assert "embed_tokens.weight" not in keys and "midlayer.hidden_norm.weight" in keys


def test_round_trip_gives_the_same_draft(tmp_path: Path) -> None:
    draft = _draft()
    export_draft(draft, LAYERS, tmp_path, dtype="float32")
    again, layers = load_draft(tmp_path, draft.embed_tokens.weight)
    assert layers == LAYERS
    ids, aux = torch.randint(0, 60, (1, 7)), torch.randn(1, 7, 72)
    for a, b in zip(draft(ids, aux, 3), again(ids, aux, 3), strict=True):
        torch.testing.assert_close(a, b)
    assert torch.equal(again.d2t, draft.d2t) and torch.equal(again.t2d, draft.t2d)


def test_a_checkpoint_without_lm_head_is_not_written(tmp_path: Path) -> None:
    state = {k: v for k, v in _draft().state_dict().items() if not k.startswith(("embed_tokens", "lm_head"))}
    with pytest.raises(ExportError, match=r"missing lm_head.weight \(expected \[40, 32\]\)"):
        write_export(state, CFG, LAYERS, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_mis_shaped_fc_is_not_written(tmp_path: Path) -> None:
    state = {k: v for k, v in _draft().state_dict().items() if not k.startswith("embed_tokens")}
    state["fc.weight"] = torch.zeros(32, 24)  # 1x target hidden: the shape the EAGLE (not EAGLE3) path feeds
    with pytest.raises(ExportError, match=r"fc.weight has shape \[32, 24\], expected \[32, 72\]"):
        write_export(state, CFG, LAYERS, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_loading_a_malformed_export_is_refused(tmp_path: Path) -> None:
    export_draft(_draft(), LAYERS, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["draft_vocab_size"] = 41
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match=r"lm_head\.weight has shape"):
        load_draft(tmp_path, torch.zeros(60, 32))


def test_a_draft_is_refused_on_a_target_of_another_depth_or_width(tmp_path: Path) -> None:
    draft = _draft()
    export_draft(draft, LAYERS, tmp_path, dtype="float32", target_layers=30)
    assert json.loads((tmp_path / "config.json").read_text())["datahunt"]["target_num_hidden_layers"] == 30
    load_draft(tmp_path, draft.embed_tokens.weight, target_layers=30)
    with pytest.raises(ExportError, match="trained on a 30-layer target; the target given has 3 layers"):
        load_draft(tmp_path, draft.embed_tokens.weight, target_layers=3)
    with pytest.raises(ExportError, match="60-token vocab and hidden size 32; the target given has 60 and 64"):
        load_draft(tmp_path, torch.zeros(60, 64))
