"""The target's hidden states as a serving engine hands them out, turned into what the trainer reads.

An engine that runs the target (vLLM with `extract_hidden_states`; `inference.hidden_states_client` talks to
it) gives, per row, the residual stream entering each extracted layer: the three aux layers and layer L (the
target's depth), which is the last layer's output before the final norm. `EngineLayers` says where each sits
among the ids the engine extracts (it sorts and deduplicates them); `to_cache_row` checks one row's answer
(its token ids are the row's, its shape [tokens, layers, hidden] is this target's, every value finite) and
returns the aux states [T, 3H] (low || mid || high) and the final state [T, H] after the target's own norm,
exactly what `datahunt capture` writes from transformers' `output_hidden_states`. The offline cache written
from an engine (`training.engine_capture`) and the online source below both go through it, so a draft trained
either way sees the same numbers.

`EngineFeatureSource` is the trainer's source when nothing is cached: it asks the engine for each batch's
states as training reaches it, and fetches the batches ahead of the step in a background thread (`prefetch`,
`lookahead` batches deep), so the trainer does not wait on the engine once the pipeline is full.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from inference.decoding.hidden_states import AuxLayers
from training.checkpoint_head import TargetHead, read_target_head
from training.errors import TrainingError
from training.offline_target import logits_from_final

logger = logging.getLogger(__name__)

# One engine answer per row: (states [tokens, layers, hidden], the token ids the engine read, its greedy token,
# the layer ids its file's folder names or None: `core.engine_states`).
EngineRow = tuple[Tensor, list[int], int | None, tuple[int, ...] | None]
# Sends rows of token ids to the engine and returns their answers in order (the caller owns the client).
Fetch = Callable[[Sequence[Sequence[int]]], list[EngineRow]]


class EngineFeatureError(TrainingError, ValueError):
    """An engine's answer that cannot be a row's states for this target: wrong ids, shape or values."""


@dataclass(frozen=True)
class EngineLayers:
    """The ids an engine must extract for `aux` on an L-layer target, and where each one lands in its answer."""

    aux: AuxLayers
    num_layers: int

    @property
    def extract_ids(self) -> list[int]:
        """What to configure on the engine: the aux input-of-layer ids and L (the final state), sorted."""
        return sorted({*self.aux.as_input().ids, self.num_layers})

    def positions(self) -> tuple[list[int], int]:
        """Index of each aux layer and of layer L in the engine's [tokens, layers, hidden] answer."""
        ids = self.extract_ids
        return [ids.index(i) for i in self.aux.as_input().ids], ids.index(self.num_layers)


def to_cache_row(answer: EngineRow, sent: Sequence[int], layers: EngineLayers, head: TargetHead, hidden: int,
                 row_id: str) -> tuple[Tensor, Tensor]:
    """(aux [T, 3H], final [T, H]) in fp32 from one engine answer; EngineFeatureError naming the row when the
    answer is not this row's states."""
    states, token_ids = answer[0], answer[1]
    expected = (len(sent), len(layers.extract_ids), hidden)
    if list(token_ids) != list(sent):
        first = next((i for i, (a, b) in enumerate(zip(token_ids, sent, strict=False)) if a != b),
                     min(len(token_ids), len(sent)))
        raise EngineFeatureError(f"row {row_id}: the engine read {len(token_ids)} token ids, not the row's "
                                 f"{len(sent)} (first difference at token {first})")
    if tuple(states.shape) != expected:
        raise EngineFeatureError(f"row {row_id}: the engine's states are {list(states.shape)}, expected "
                                 f"[tokens, layers, hidden] = {list(expected)}: is it extracting layers "
                                 f"{layers.extract_ids} of this target?")
    values = states.float()
    if not bool(torch.isfinite(values).all()):
        raise EngineFeatureError(f"row {row_id}: the engine's states hold non-finite values")
    where, last = layers.positions()
    aux = torch.cat([values[:, i] for i in where], dim=-1)
    return aux, head.final_state(values[:, last])


def agrees_with_engine(final: Tensor, head: TargetHead, next_token: int | None, top: int = 5) -> bool | None:
    """Whether the engine's greedy token after the row is among the `top` tokens of the target's head over the
    row's last final state (None when the engine did not say): the states and the head are one model's."""
    if next_token is None:
        return None
    logits = final[-1].float() @ head.head.float().T
    return bool(next_token in logits.topk(top).indices.tolist())


class EngineFeatureSource:
    """The trainer's states from a live engine: `lookup(ids, attn)` gives a padded batch's aux states and
    target logits; `prefetch(batches)` starts fetching the batches to come in a background thread."""

    def __init__(self, fetch: Fetch, layers: EngineLayers, head: TargetHead, hidden: int, softcap: float | None,
                 lookahead: int = 4) -> None:
        self._fetch, self.layers, self.head, self.hidden, self.softcap = fetch, layers, head, hidden, softcap
        self._head_f32 = head.head.float()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-features")
        self._pending: dict[bytes, Future[list[tuple[Tensor, Tensor]]]] = {}
        self._queue: list[tuple[Tensor, Tensor]] = []
        self._lookahead = max(1, lookahead)
        self._lock = threading.Lock()
        self.rows_fetched = 0

    def close(self) -> None:
        """Stop prefetching (the batch being fetched finishes)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _rows(ids: Tensor, attn: Tensor) -> list[list[int]]:
        return [ids[i, : int(attn[i].sum())].tolist() for i in range(ids.shape[0])]

    @staticmethod
    def _key(ids: Tensor, attn: Tensor) -> bytes:
        return b"|".join(ids[i, : int(attn[i].sum())].to(torch.int64).cpu().numpy().tobytes()
                         for i in range(ids.shape[0]))

    def _convert(self, rows: list[list[int]]) -> list[tuple[Tensor, Tensor]]:
        answers = self._fetch(rows)
        self.rows_fetched += len(rows)
        return [to_cache_row(a, r, self.layers, self.head, self.hidden, f"of {len(r)} tokens")
                for a, r in zip(answers, rows, strict=True)]

    def prefetch(self, batches: Sequence[tuple[Tensor, Tensor]]) -> None:
        """Queue (ids, attention mask) batches in the order training will ask for them; up to `lookahead` of
        them are fetched ahead of the step."""
        with self._lock:
            self._queue = list(batches)
            self._fill()

    def _fill(self) -> None:
        while self._queue and len(self._pending) < self._lookahead:
            ids, attn = self._queue.pop(0)
            key = self._key(ids, attn)
            if key not in self._pending:
                self._pending[key] = self._pool.submit(self._convert, self._rows(ids, attn))

    def lookup(self, ids: Tensor, attn: Tensor) -> tuple[Tensor, Tensor]:
        """Aux states [B, T, 3H] and target logits [B, T, V] of a right-padded batch (padding rows are zeros)."""
        key = self._key(ids, attn)
        with self._lock:
            future = self._pending.pop(key, None)
            if future is None:  # not prefetched (a batch out of the announced order): fetch it now
                future = self._pool.submit(self._convert, self._rows(ids, attn))
            self._fill()
        rows = future.result()
        b, t = ids.shape
        aux = torch.zeros(b, t, 3 * self.hidden)
        final = torch.zeros(b, t, self.hidden)
        for i, (row_aux, row_final) in enumerate(rows):
            n = row_aux.shape[0]
            aux[i, :n], final[i, :n] = row_aux, row_final
        logits = logits_from_final(final, self.head.head, self.softcap)
        return aux.to(ids.device), logits.to(ids.device)


def engine_head_target(target_dir: Path) -> tuple[Any, Any]:
    """The target as engine-fed training needs it, read from its folder without its layers: the head-only
    target (config, scaled embeddings, head, final norm; fp32) and its tokenizer."""
    from transformers import AutoConfig, AutoTokenizer

    from training.offline_cache import HeadOnlyTarget

    head = read_target_head(target_dir, torch.float32)
    config = AutoConfig.from_pretrained(str(target_dir))
    text = getattr(config, "text_config", None) or config
    return HeadOnlyTarget(text, head.embed, head.head, head.norm), AutoTokenizer.from_pretrained(str(target_dir))


def engine_feature_source(target_dir: Path, fetch: Fetch, aux: AuxLayers, target: Any,
                          lookahead: int = 4) -> EngineFeatureSource:
    """The trainer's source over an engine's `fetch` for the target in `target_dir` (`target`: its head-only
    stand-in, whose config gives the depth, width and softcap)."""
    config = target.config
    layers = EngineLayers(aux, int(config.num_hidden_layers))
    head = read_target_head(target_dir, torch.float32)
    return EngineFeatureSource(fetch, layers, head, int(config.hidden_size),
                               getattr(config, "final_logit_softcapping", None), lookahead=lookahead)
