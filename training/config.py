"""The strict run configuration of one draft training run, saved beside every checkpoint.

Unknown keys are rejected (a typo must not silently fall back to a default). Defaults follow the EAGLE-3
recipe: 7 TTT steps weighted 0.8^i, AdamW lr 1e-4, 1.5% warmup then cosine, gradient clip 0.5, max length
2048, a 32,000-token draft vocab.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from training.atomic_files import write_file
from training.errors import TrainingError

CONFIG_FILE = "train_config.json"


class ConfigError(TrainingError, ValueError):
    """A run configuration that cannot be used (unknown key, bad value, unreadable file)."""


class TrainConfig(BaseModel):
    """Everything one run needs. Paths are local folders or files."""

    model_config = ConfigDict(extra="forbid")

    data: Path | None = Field(default=None, description="Training JSONL (regenerated ShareGPT rows or curated "
                              "rows); not needed with `cache`, whose rows are the ones trained on.")
    target: Path = Field(description="Folder of the target model (transformers layout) and its tokenizer.")
    out: Path = Field(description="Run folder: checkpoints/, export/, vocab cache.")
    messages_field: Literal["conversations", "messages", "original_messages"] = Field(
        default="conversations", description="Which turns to train on; original_messages is the control run."
    )
    reasoning: Literal["keep", "served-on", "served-off", "drop"] | None = Field(
        default=None, description="How the target's thinking is served, rendered so in every row; default: what the "
        "rows' regeneration recorded (keep where none).")
    tool_rendering: Literal["native", "text"] | None = Field(
        default=None, description="Tool calls through the template's own tokens (native) or datahunt's text blocks "
        "(text, for a template without tool support); default: what the rows recorded (native where none).")
    max_length: int = Field(default=2048, ge=8)
    ttt_steps: int = Field(default=7, ge=1, le=16)
    step_decay: float = Field(default=0.8, gt=0, le=1)
    draft_vocab_size: int = Field(default=32000, ge=2)
    aux_layer_ids: tuple[int, int, int] | None = Field(
        default=None, description="Input-of-layer ids (SGLang convention); default [2, L//2, L-3]."
    )
    head_init: Literal["random", "target"] = Field(
        default="random", description="random (SpecForge's start), or the draft's lm_head from the target's "
        "output rows of the draft vocab and its final norm (Llama-style norms only): a warm start.")
    draft_intermediate_size: int | None = Field(default=None, description="Default: the target's.")
    serving_context: int | None = Field(
        default=None, description="max_position_embeddings written to the draft; default the target's."
    )
    export_dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        default="auto", description="dtype of the exported draft; auto = the target's declared dtype."
    )
    export_engine: Literal["sglang", "vllm", "both"] = Field(
        default="sglang", description="The engine whose layer-id layout export/ holds; both = export/ for SGLang "
        "and export-vllm/ beside it (the ids mean other layers in the two engines: training/export.py).")
    mode: Literal["online", "offline"] = "online"
    cache: Path | None = Field(
        default=None, description="Offline mode: a cache written by `datahunt capture` (rows, aux and final states); "
        "the target's decoder layers are then not loaded, only its config, tokenizer and what the cache holds.")
    features_server: str | None = Field(
        default=None, description="Online mode fed by a serving engine: the URL of a vLLM server started with the "
        "extraction config (`datahunt vllm-command --extract`); the target is never loaded, only its embeddings, "
        "head and final norm, and each batch's states are asked of the engine as training reaches them.")
    init_draft: Path | None = Field(
        default=None, description="Warm start: an exported draft folder (ours or another's) whose weights the run "
        "starts from, keeping its draft-vocab map (d2t/t2d) as it is (`training.warm_start`).")
    select_every: int | None = Field(
        default=None, ge=1, description="Every N steps (and at the last), estimate acceptance on held-out training "
        "rows by replay and export the best draft, not the last (`training.selection`); off when unset.")
    select_rows: int = Field(default=64, ge=1, description="Training rows held out for the estimate.")
    select_k: int = Field(default=5, ge=1, le=16, description="Draft chain length of the estimate.")
    lr: float = Field(default=1e-4, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    warmup_ratio: float = Field(default=0.015, ge=0, lt=1)
    grad_clip: float = Field(default=0.5, gt=0)
    batch_size: int = Field(default=1, ge=1, description="Rows per batch (when batch_tokens is not set).")
    batch_tokens: int | None = Field(
        default=None, ge=8, description="Token budget per batch: rows of similar length are packed until "
        "rows x padded width would pass it (the fast path on a GPU; overrides batch_size).")
    epochs: int = Field(default=1, ge=1)
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many optimizer steps.")
    save_every: int = Field(default=1000, ge=1)
    keep_checkpoints: int = Field(default=3, ge=1, description="Checkpoints kept, the newest: older ones are "
                                  "removed after each save (two or more keep a fallback when the newest is "
                                  "unreadable).")
    log_every: int = Field(default=50, ge=1, description="Steps between progress lines (each reads the GPU once).")
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    bf16: bool = Field(default=True, description="bf16 autocast on GPU (ignored on CPU).")
    attention_kernels: Literal["auto", "no-cudnn"] = Field(
        default="no-cudnn", description="Fused attention a step may use: all but cuDNN's (which builds a plan the "
        "first time it meets a batch shape, and a length-packed epoch meets hundreds; see "
        "inference/decoding/attention_kernels.py), or torch's own choice.")
    resume: bool = Field(default=True, description="Continue from the newest checkpoint in out/checkpoints.")
    force_resume: bool = Field(default=False, description="Resume even when settings that change the training "
                               "(lr, batch, data, …) differ from the checkpoint's; the new ones apply from there.")

    @model_validator(mode="after")
    def _rows_from_somewhere(self) -> TrainConfig:
        if self.cache is not None and self.mode != "offline":
            raise ValueError("cache is read in offline mode: set mode offline (--mode offline)")
        if self.features_server is not None and (self.cache is not None or self.mode != "online"):
            raise ValueError("features_server feeds online mode from an engine: leave out mode offline and cache")
        if self.data is None and self.cache is None:
            raise ValueError("data is required (or, in offline mode, a cache written by `datahunt capture`)")
        return self


def load_config(path: Path, overrides: Mapping[str, object] | None = None) -> TrainConfig:
    """Read a JSON config and apply overrides; raise ConfigError with pydantic's message on a bad key."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read training config {path}: {exc}") from None
    return make_config({**raw, **(overrides or {})})


def make_config(values: Mapping[str, object]) -> TrainConfig:
    """Validate values into a TrainConfig; raise ConfigError naming the offending keys."""
    try:
        return TrainConfig.model_validate(dict(values))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid training config: {problems}") from None


def save_config(cfg: TrainConfig, folder: Path, *, root: Path | None = None) -> Path:
    """Write cfg as train_config.json into folder and return the path (whole, and never through a link below
    `root`, default `folder` itself)."""
    path = folder / CONFIG_FILE
    write_file(path, cfg.model_dump_json(indent=2).encode("utf-8"), root=root)
    return path
