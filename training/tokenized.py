"""The training rows as token ids: a run's data rendered by the target's chat template and masked
(`tokenize_file`), each conversation rendered once per process when runs share a `RenderedRows` memo, and the
tokenizer's fingerprint that keys every cache built from those ids (`tokenizer_hash`)."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from core.chat_render import Reasoning, ToolRendering
from training.config import ConfigError, TrainConfig
from training.data import (
    Conversation,
    Rendering,
    TokenizedRow,
    check_template,
    check_tool_support,
    load_conversations,
    record_rendering,
    run_rendering,
    tokenize_rows,
    training_file,
)
from training.token_cache import cache_key, cached_rows

logger = logging.getLogger(__name__)


class RenderedRows:
    """Rendered rows by (tokenizer and rendering, max_length, id, turns and tools), for the runs of one caller
    over nested subsets of the same data (a data-scaling sweep, a value run): each conversation is rendered
    once. Bounded at `limit` rows; a miss only costs the rendering again. A run given none renders its rows
    (or reads them from its run folder's cache)."""

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._rows: dict[tuple[str, int, str, str], TokenizedRow] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def render(self, tokenizer: Any, fingerprint: str, conversations: list[Conversation], max_length: int,
               rendering: Rendering) -> list[TokenizedRow]:
        """Every conversation rendered and masked: the ones seen before from the memo, the rest in one batched
        pass (`tokenize_rows`)."""
        keys = [(fingerprint, max_length, c[0], json.dumps([c[1], c.tools], sort_keys=True)) for c in conversations]
        missing = [i for i, key in enumerate(keys) if key not in self._rows]
        rendered = (tokenize_rows(tokenizer, [conversations[i] for i in missing], max_length, rendering)
                    if missing else [])
        fresh = dict(zip(missing, rendered, strict=True))
        for i, row in fresh.items():
            if len(self._rows) < self.limit:
                self._rows[keys[i]] = row
        return [fresh[i] if i in fresh else self._rows[key] for i, key in enumerate(keys)]


def tokenize_file(cfg: TrainConfig, tokenizer: Any, memo: RenderedRows | None = None) -> list[TokenizedRow]:
    """Render and mask every row of cfg.data (tools, reasoning mode and tool rendering as the run records them in
    rendering.json); rows with nothing supervised within max_length are dropped. The run folder keeps the rows
    (a resumed run, or a run again on the same data, loads them); `memo` shares renderings across runs."""
    if cfg.data is None:
        raise ConfigError("data is required unless the rows come from a cache (--cache)")
    conversations = load_conversations(cfg.data, cfg.messages_field)
    rendering = run_rendering(conversations, Reasoning(cfg.reasoning) if cfg.reasoning else None,
                              ToolRendering(cfg.tool_rendering) if cfg.tool_rendering else None)
    check_tool_support(tokenizer, conversations, rendering)
    record_rendering(cfg.out, rendering)
    check = check_template(tokenizer, conversations[0][1], conversations[0].tools, rendering)
    if not check.ids_match:  # the mask is derived from renderings; warn when they differ from the template's ids
        logger.warning("chat template check on row %s: %s", conversations[0][0], check.detail)
    fingerprint = tokenizer_hash(tokenizer) + "/" + "/".join(rendering.as_json().values())
    key = cache_key(training_file(cfg.data), cfg.messages_field, fingerprint, cfg.max_length)
    renderer = memo if memo is not None else RenderedRows(limit=0)
    rows = cached_rows(cfg.out, key, lambda: renderer.render(tokenizer, fingerprint, conversations, cfg.max_length,
                                                              rendering))
    kept = [r for r in rows if sum(r.loss_mask) > 0]
    if len(kept) < len(rows):
        logger.warning("dropped %d rows with no supervised token within %d tokens", len(rows) - len(kept),
                       cfg.max_length)
    return kept


def tokenizer_hash(tokenizer: Any) -> str:
    """A stable fingerprint of the tokenizer's vocabulary and chat template."""
    blob = json.dumps([sorted(tokenizer.get_vocab().items()), getattr(tokenizer, "chat_template", None)])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]
