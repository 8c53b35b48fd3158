"""Warm start (`init_draft`): a run that starts from an exported draft's weights and keeps its vocabulary map.

An EAGLE-3 draft's lm_head row i scores target token `i + d2t[i]`: the head and the map are one thing. A
fine-tune that derives the map again from its own data (the top-N tokens of the new rows) and loads the old
head over it silently scores other tokens than the head learned, and acceptance drops with no error anywhere.
So a warm start takes the folder's d2t/t2d as they are, never the data's: the map is reported with its
coverage of this run's supervised tokens, and the run's `draft_vocab_size` must equal the folder's (the head's
rows). The folder's aux layers must be the run's (the fc reads those states); its embedding is the target's.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import torch

from inference.decoding.draft_model import Eagle3Draft
from inference.decoding.hidden_states import AuxLayers, target_embeddings
from training.config import ConfigError, TrainConfig
from training.export import ExportError, load_draft
from training.vocab import DraftVocab, count_supervised

logger = logging.getLogger(__name__)


@dataclass
class WarmStart:
    """The draft read from `init_draft` (fp32, the target's embedding in) and its own vocab map."""

    draft: Eagle3Draft
    vocab: DraftVocab


def warm_start(cfg: TrainConfig, target: Any, layers: AuxLayers, pairs: list[tuple[list[int], list[int]]]
               ) -> WarmStart:
    """The draft of cfg.init_draft for this target and layers, with its map kept and its coverage of `pairs`'
    supervised tokens; ConfigError when it cannot start this run (other target, layers or draft vocab size)."""
    assert cfg.init_draft is not None
    if not (cfg.init_draft / "config.json").is_file():
        raise ConfigError(f"init_draft {cfg.init_draft} is not an exported draft folder (no config.json)")
    try:
        draft, trained_on = load_draft(cfg.init_draft, target_embeddings(target).cpu(),
                                       target_layers=target.config.num_hidden_layers)
    except ExportError as exc:
        raise ConfigError(f"init_draft: {exc}") from None
    if trained_on.as_input().ids != layers.as_input().ids:
        raise ConfigError(f"init_draft {cfg.init_draft} reads the target's layers {list(trained_on.as_input().ids)} "
                          f"(input-of-layer); this run's are {list(layers.as_input().ids)}: pass --aux-layer-ids "
                          "to match, or start from scratch")
    size = draft.cfg.draft_vocab_size
    if size != cfg.draft_vocab_size:
        raise ConfigError(f"init_draft {cfg.init_draft} has a draft vocab of {size} tokens; this run asks for "
                          f"{cfg.draft_vocab_size}: pass --draft-vocab-size {size} (its map is kept as it is)")
    if cfg.head_init != "random":
        logger.warning("head_init %s is not applied: the warm start keeps the init draft's head", cfg.head_init)
    return WarmStart(draft=draft, vocab=kept_vocab(draft, pairs))


def kept_vocab(draft: Eagle3Draft, pairs: list[tuple[list[int], list[int]]]) -> DraftVocab:
    """The draft's own map as a DraftVocab, with its coverage of the supervised tokens of `pairs`."""
    d2t, t2d = draft.d2t.detach().cpu().clone(), draft.t2d.detach().cpu().clone()
    counts = count_supervised(pairs)
    used = (d2t + torch.arange(d2t.shape[0])).tolist()
    total = sum(counts.values())
    coverage = sum(counts[i] for i in used) / total if total else 0.0
    key = "init-" + hashlib.sha256(d2t.numpy().tobytes()).hexdigest()[:20]
    logger.info("warm start: keeping the init draft's vocab map (%d ids, %.1f%% of this data's supervised tokens)",
                d2t.shape[0], 100 * coverage)
    return DraftVocab(d2t=d2t, t2d=t2d, coverage=coverage, key=key)
