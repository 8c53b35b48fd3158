"""The draft a run starts from: shaped after the target, on the target's frozen embeddings, its vocab maps set,
its output side warm-started from the target's head when asked; and the dtype it is exported in."""

from __future__ import annotations

from typing import Any

import torch

from core.target_config import read_target_config
from inference.decoding.draft_model import DraftConfig, Eagle3Draft
from inference.decoding.hidden_states import target_embeddings
from training.config import TrainConfig
from training.offline_target import output_head
from training.vocab import DraftVocab


def build_draft(target: Any, cfg: TrainConfig, vocab: DraftVocab) -> Eagle3Draft:
    """A fresh draft shaped after the target, with its embeddings copied (frozen) and the vocab maps set."""
    draft = new_draft(target, cfg)
    draft.set_vocab(vocab.d2t, vocab.t2d)
    if cfg.head_init == "target":
        init_head_from_target(draft, target)
    return draft


def new_draft(target: Any, cfg: TrainConfig) -> Eagle3Draft:
    """A draft shaped after the target and cfg, with the target's embeddings copied (frozen); vocab maps unset."""
    tc = target.config
    draft_cfg = DraftConfig(
        hidden_size=tc.hidden_size,
        intermediate_size=cfg.draft_intermediate_size or tc.intermediate_size,
        num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=getattr(tc, "num_key_value_heads", tc.num_attention_heads),
        vocab_size=target.get_input_embeddings().weight.shape[0],
        draft_vocab_size=cfg.draft_vocab_size,
        target_hidden_size=tc.hidden_size,
        max_position_embeddings=cfg.serving_context or tc.max_position_embeddings,
        rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-6),
        rope_theta=target_rope_theta(tc),
        head_dim=getattr(tc, "head_dim", None),
    )
    draft = Eagle3Draft(draft_cfg)
    draft.embed_tokens.weight.data.copy_(target_embeddings(target))
    return draft


def init_head_from_target(draft: Eagle3Draft, target: Any) -> None:
    """Warm-start the draft's output side from the target's: lm_head row i is the target's output row of
    target id d2t-mapped i, and the final norm is the target's where both use the Llama convention (Gemma's
    norm scales by 1 + w, so it stays at ones). The draft then starts out reading its hidden state the way
    the target reads its last one; the fused layer-(L-3) state it starts from is already close to that."""
    head, _ = output_head(target)
    rows = draft.draft_to_target(torch.arange(draft.cfg.draft_vocab_size, device=draft.d2t.device))
    draft.lm_head.weight.data.copy_(head.float()[rows.to(head.device)].to(draft.lm_head.weight.device))
    norm = getattr(getattr(target, "model", None), "norm", None)
    model_type = str(getattr(target.config, "model_type", ""))
    weight = getattr(norm, "weight", None)
    if weight is not None and not model_type.startswith("gemma") and weight.shape == draft.norm.weight.shape:
        draft.norm.weight.data.copy_(weight.detach().float())


def export_dtype(cfg: TrainConfig, target: Any) -> str:
    """The dtype to export in: the configured one, else the target's declared dtype (what an engine serves).

    Declared means the folder's config.json, not the loaded model's dtype: on a CPU the target is loaded in
    float32, and a draft exported in float32 for a bfloat16 target would be refused by the preflight (or served
    at half speed)."""
    if cfg.export_dtype != "auto":
        return cfg.export_dtype
    try:
        on_disk = read_target_config(cfg.target) or {}
    except (OSError, ValueError):
        on_disk = {}
    declared = str(on_disk.get("dtype") or on_disk.get("torch_dtype") or getattr(target.config, "dtype", None)
                   or getattr(target.config, "torch_dtype", None) or "")
    declared = declared.replace("torch.", "")
    return declared if declared in {"bfloat16", "float16", "float32"} else "bfloat16"


def target_rope_theta(config: Any) -> float:
    """The target's RoPE base (full-attention layers where they differ), else Llama's 10000."""
    params = getattr(config, "rope_parameters", None) or {}
    params = params.get("full_attention", params)
    return float(getattr(config, "rope_theta", None) or params.get("rope_theta") or 10000.0)
