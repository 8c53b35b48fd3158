"""`datahunt capture --engine vllm`: the offline cache written from a serving engine's hidden states.

The story: render and mask the rows exactly as `train` does (the same function `datahunt capture` uses); read
the target's embeddings, head and final norm from its checkpoint (never its layers); check the engine is the
one to ask (it extracts the layers this capture needs, it serves this target: its path's identity, its
tokenizer's rendering, and its greedy token after a probe row agrees with this head over its own final
state); plan the shards exactly as the transformers capture does; skip the shards a previous run finished;
send each remaining shard's rows to the engine (the caller's `fetch`, concurrent), check every answer
(`engine_features.to_cache_row`), write the shard whole with its marker; mark the cache complete. The cache
is the one `train --mode offline --cache` reads, with the engine, its version and the layers it extracted
recorded beside the usual identity. A killed run (or a dead server) leaves whole shards only; the same
command resumes. Memory and disk are bounded by one shard: the engine's files are deleted as they are read.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from core.json_types import JSONObject
from inference.decoding.hidden_states import AuxLayers, default_aux_layers
from training.capture import CaptureError, CaptureResult, tokenize
from training.checkpoint_head import TargetHead, read_target_head
from training.data import TokenizedRow
from training.engine_features import EngineLayers, EngineRow, Fetch, agrees_with_engine, to_cache_row
from training.offline_cache import (
    DTYPES,
    FORMAT,
    HEAD_FILE,
    CacheManifest,
    bytes_per_token,
    finish_cache,
    plan_shards,
    shard_done,
    shard_name,
    start_cache,
    target_identity,
    write_head,
    write_shard,
)
from training.offline_target import data_hash

logger = logging.getLogger(__name__)
# (rows done, rows in all, tokens done)
Progress = Callable[[int, int, int], None]


@dataclass(frozen=True)
class EngineFacts:
    """What the engine said about itself before any row was sent (from `inference.hidden_states_client.probe`)."""

    name: str  # "vllm"
    url: str
    version: str | None
    served: str | None  # the path (or Hub id) the engine loaded
    probe_ids: list[int] | None = None  # the engine's own rendering of a probe conversation (its /tokenize)


@dataclass
class EngineCaptureConfig:
    """One capture from an engine: the rows (as `train` renders them), the target folder, the cache folder."""

    data: Path
    target: Path
    out: Path
    messages_field: str = "conversations"
    max_length: int = 2048
    aux_layer_ids: tuple[int, int, int] | None = None
    shard_bytes: int = 1 << 30
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    rows_per_request_batch: int = 64  # rows sent at once (the client caps how many are in flight)
    notes: list[str] = field(default_factory=list)


def run_engine_capture(cfg: EngineCaptureConfig, engine: EngineFacts, fetch: Fetch,
                       on_progress: Progress | None = None) -> CaptureResult:
    """Capture cfg.data through the engine into cfg.out (resuming a cache left unfinished); the summary."""
    from transformers import AutoConfig, AutoTokenizer

    from training.tokenized import tokenizer_hash

    started = time.perf_counter()
    if not cfg.target.is_dir():
        raise CaptureError(f"target folder {cfg.target} does not exist")
    tokenizer = AutoTokenizer.from_pretrained(str(cfg.target))
    config = AutoConfig.from_pretrained(str(cfg.target))
    text = getattr(config, "text_config", None) or config
    num_layers, hidden = int(text.num_hidden_layers), int(text.hidden_size)
    layers = EngineLayers(AuxLayers(cfg.aux_layer_ids, "input") if cfg.aux_layer_ids
                          else default_aux_layers(num_layers), num_layers)
    try:
        layers.aux.validate(num_layers)
    except ValueError as exc:
        raise CaptureError(str(exc)) from None
    identity = target_identity(cfg.target)
    check_served(engine, cfg.target, identity)
    rows = tokenize(cfg.data, cfg.messages_field, cfg.max_length, tokenizer)
    check_tokenizer(engine, tokenizer, cfg.data, cfg.messages_field)
    head = read_target_head(cfg.target, DTYPES[cfg.dtype])
    agreement, seen = check_engine_head(fetch, rows[0], layers, head, hidden, engine.url)
    plan = plan_shards([len(r.input_ids) for r in rows], bytes_per_token(hidden, cfg.dtype), cfg.shard_bytes)
    manifest = engine_manifest(rows, plan, layers, identity, tokenizer_hash(tokenizer), cfg.dtype, text, engine,
                               agreement, seen)
    start_cache(cfg.out, manifest)
    if not (cfg.out / HEAD_FILE).is_file():
        write_head(cfg.out, head.embed, head.head, head.norm)
    pending = [i for i in range(len(plan)) if not shard_done(cfg.out, i)]
    done_rows = sum(n for i, (_, n) in enumerate(plan) if i not in pending)
    done_tokens = sum(len(r.input_ids) for i, (a, n) in enumerate(plan) if i not in pending for r in rows[a:a + n])
    if on_progress is not None:
        on_progress(done_rows, len(rows), done_tokens)
    for index in pending:
        first, count = plan[index]
        shard_rows = rows[first:first + count]
        def shard_progress(n: int, t: int, rows_before: int = done_rows, tokens_before: int = done_tokens) -> None:
            if on_progress is not None:
                on_progress(rows_before + n, len(rows), tokens_before + t)

        aux, final = capture_rows(fetch, shard_rows, layers, head, hidden, cfg.dtype, cfg.rows_per_request_batch,
                                  shard_progress)
        write_shard(cfg.out, index, [r.id for r in shard_rows], [(r.input_ids, r.loss_mask) for r in shard_rows],
                    aux, final, cfg.dtype)
        done_rows += count
        done_tokens += sum(len(r.input_ids) for r in shard_rows)
    complete = finish_cache(cfg.out)
    total_bytes = sum((cfg.out / f"{shard_name(i)}.safetensors").stat().st_size for i in range(len(plan)))
    result = CaptureResult(folder=cfg.out, rows=len(rows), tokens=int(complete["tokens"]), shards=len(plan),
                           written=len(pending), skipped=len(plan) - len(pending), bytes=total_bytes,
                           wall_s=time.perf_counter() - started)
    with (cfg.out / "capture_runs.jsonl").open("a") as log:
        log.write(json.dumps({"engine": engine.name, "url": engine.url, "written": result.written,
                              "skipped": result.skipped, "wall_s": round(result.wall_s, 2)}) + "\n")
    return result


def capture_rows(fetch: Fetch, rows: list[TokenizedRow], layers: EngineLayers, head: TargetHead, hidden: int,
                 dtype: str, per_batch: int, on_rows: Callable[[int, int], Any]) -> tuple[list[Any], list[Any]]:
    """The aux and final states of `rows`, asked of the engine `per_batch` rows at a time, in the cache dtype."""
    aux, final = [], []
    tokens = 0
    for a in range(0, len(rows), per_batch):
        batch = rows[a:a + per_batch]
        answers: list[EngineRow] = fetch([r.input_ids for r in batch])
        for row, answer in zip(batch, answers, strict=True):
            row_aux, row_final = to_cache_row(answer, row.input_ids, layers, head, hidden, row.id)
            aux.append(row_aux.to(DTYPES[dtype]))
            final.append(row_final.to(DTYPES[dtype]))
            tokens += len(row.input_ids)
        on_rows(a + len(batch), tokens)
    return aux, final


def check_layers(url: str, seen: tuple[int, ...] | None, layers: EngineLayers) -> None:
    """Refuse an engine whose states folder names other layers than this capture needs."""
    wanted = layers.extract_ids
    if seen is not None and list(seen) != wanted:
        raise CaptureError(
            f"{url} extracts layers {list(seen)}, but this capture needs {wanted} (aux "
            f"{list(layers.aux.as_input().ids)} and {layers.num_layers} for the final state): restart it with the "
            f"line `datahunt vllm-command --target T --extract --aux-layers "
            f"{','.join(map(str, layers.aux.as_input().ids))}` prints")


def check_served(engine: EngineFacts, target: Path, identity: str) -> None:
    """Refuse an engine whose served folder (when this machine can read it) is another target than `target`."""
    served = Path(engine.served) if engine.served else None
    if served is None or not served.is_dir() or served.resolve() == target.resolve():
        return
    try:
        theirs = target_identity(served)
    except (OSError, ValueError):
        return
    if theirs != identity:
        raise CaptureError(f"{engine.url} serves {served} (identity {theirs[:12]}), not the target {target} "
                           f"({identity[:12]}): capture from a server of this target")


def probe_conversation(data: Path, field: str) -> tuple[list[dict[str, Any]], dict[str, bool]] | None:
    """A conversation of `data` to ask the engine's tokenizer about: the first without tool use (a server's
    rendering of tools depends on its tool parser too), with the chat-template arguments of the rows' recorded
    reasoning mode; None when every row uses tools."""
    from core.chat_render import has_tool_turns, template_kwargs
    from training.data import load_conversations, run_rendering

    conversations = load_conversations(data, field)
    rendering = run_rendering(conversations)
    for row in conversations[:256]:
        if not has_tool_turns(row[1], row.tools):
            return [dict(t) for t in row[1]], template_kwargs(rendering.reasoning)
    return None


def check_tokenizer(engine: EngineFacts, tokenizer: Any, data: Path, field: str) -> None:
    """Refuse an engine whose chat template renders the probe conversation to other ids than this target's."""
    from core.chat_render import render_ids
    from training.data import load_conversations, run_rendering

    probe = probe_conversation(data, field)
    if engine.probe_ids is None or probe is None:
        return
    rendering = run_rendering(load_conversations(data, field))
    ours = render_ids(tokenizer, probe[0], reasoning=rendering.reasoning)
    if ours != list(engine.probe_ids):
        raise CaptureError(f"{engine.url} renders a row to {len(engine.probe_ids)} token ids, this target's "
                           f"tokenizer to {len(ours)} (or other ids): the server runs another tokenizer or chat "
                           "template than --target")


def check_engine_head(fetch: Fetch, row: TokenizedRow, layers: EngineLayers, head: TargetHead, hidden: int,
                      url: str) -> tuple[bool | None, bool]:
    """Ask for one row and check its answer: the layers its folder names (when it names them), this row's
    states of this target's shape, and their final state through this target's head predicting the engine's own
    next token. Returns (that agreement or None when unknown, whether the layers were seen)."""
    answer = fetch([row.input_ids])[0]
    check_layers(url, answer[3], layers)
    if answer[3] is None:
        logger.warning("%s writes its states into a folder not named for its layers: the aux layers are taken on "
                       "trust (start it with `datahunt vllm-command --extract` to have them checked)", url)
    _, final = to_cache_row(answer, row.input_ids, layers, head, hidden, row.id)
    agreed = agrees_with_engine(final, head, answer[2])
    if agreed is False:
        raise CaptureError("the engine's next token is not among this target head's top 5 over the engine's own "
                           "final state: the server runs other weights (or another final norm or head) than "
                           "--target")
    return agreed, answer[3] is not None


def engine_manifest(rows: list[TokenizedRow], plan: list[tuple[int, int]], layers: EngineLayers, identity: str,
                    tokenizer_fingerprint: str, dtype: str, config: Any, engine: EngineFacts,
                    agreement: bool | None, layers_seen: bool) -> CacheManifest:
    """The cache manifest, with the engine recorded (its name is part of the identity a resume must match)."""
    details: JSONObject = {"url": engine.url, "version": engine.version, "served": engine.served,
                           "extracted_layer_ids": [*layers.extract_ids],
                           "layer_ids_checked": layers_seen,
                           "next_token_agreement": agreement}
    return {
        "format": FORMAT, "target_identity": identity, "tokenizer_hash": tokenizer_fingerprint,
        "data_hash": data_hash([(r.input_ids, r.loss_mask) for r in rows]),
        "aux_layers_input": list(layers.aux.as_input().ids), "dtype": dtype,
        "hidden_size": int(config.hidden_size), "model_type": str(getattr(config, "model_type", "")),
        "num_hidden_layers": int(config.num_hidden_layers),
        "softcap": getattr(config, "final_logit_softcapping", None),
        "rows": len(rows), "tokens": sum(len(r.input_ids) for r in rows),
        "shards": [{"row_ids": [r.id for r in rows[a:a + n]], "first": a, "count": n} for a, n in plan],
        "engine": engine.name, "engine_details": details,
    }
