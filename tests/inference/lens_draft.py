"""A draft built by hand from the target's own weights, so a real engine accepts its tokens without hours of CPU
training: its guess is the target's "logit lens" at the layer its third aux state comes from.

`fc` passes the third aux state through (the residual stream entering layer 27 of SmolLM2's 30, for the
default ids) and drops the other two; the decoder layer adds nothing (its output projections are zero, so the
residual passes unchanged); `norm` and `lm_head` are the target's final norm and (tied) embedding over the
first 32,768 token ids (BPE ids grow as merges get rarer; vLLM 0.32 refuses a `d2t` map when the draft's
vocabulary is the target's whole one, and datahunt's export always writes it). Its position-0 guess is then the target's head applied three layers early, which agrees with
the target's own greedy token about 45 % of the time on SmolLM2-135M-Instruct (26: 35 %, 20: 14 %, 15: 6 %,
measured with transformers on 12 regenerated conversations). So the draft depends on which layers it is fed,
as a trained one does: fed the wrong layers it collapses, fed the layer before (the other engine's id
convention) it loses part of its acceptance. It is written by datahunt's own export, like a trained draft.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from inference.decoding.draft_model import DraftConfig
from inference.decoding.hidden_states import AuxLayers
from training.export import Engine, expected_shapes, write_export

DRAFT_VOCAB = 32768


def write_lens_draft(target: Path, out: Path, engine: Engine = "vllm") -> Path:
    """Export the logit-lens draft of the target folder `target` into `out`, in `engine`'s layer-id layout."""
    config = json.loads((target / "config.json").read_text())
    weights = load_file(str(target / "model.safetensors"))
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    rope = (config.get("rope_parameters") or {}).get("rope_theta") or config.get("rope_theta", 10000.0)
    cfg = DraftConfig(hidden_size=hidden, intermediate_size=config["intermediate_size"],
                      num_attention_heads=config["num_attention_heads"],
                      num_key_value_heads=config["num_key_value_heads"], vocab_size=config["vocab_size"],
                      draft_vocab_size=DRAFT_VOCAB, target_hidden_size=hidden,
                      max_position_embeddings=config["max_position_embeddings"], rms_norm_eps=config["rms_norm_eps"],
                      rope_theta=rope, head_dim=config.get("head_dim"))
    state = {name: torch.zeros(shape) for name, shape in expected_shapes(cfg).items()}
    state["fc.weight"][:, 2 * hidden:] = torch.eye(hidden)  # the third aux state, passed through
    for norm in ("midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
                 "midlayer.post_attention_layernorm.weight"):
        state[norm] = torch.ones(hidden)
    state["norm.weight"] = weights["model.norm.weight"].float()
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"])
    state["lm_head.weight"] = head[:DRAFT_VOCAB].float()
    state["d2t"] = torch.zeros(DRAFT_VOCAB, dtype=torch.int64)  # draft id i is target id i
    state["t2d"] = torch.arange(cfg.vocab_size) < DRAFT_VOCAB
    aux = AuxLayers((2, layers // 2, layers - 3), "input")
    return write_export(state, cfg, aux, out, dtype=config.get("dtype") or "bfloat16", target_layers=layers,
                        engine=engine)
