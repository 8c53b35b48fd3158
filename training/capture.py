"""`datahunt capture`: run the target once over the training rows and write the offline cache (`offline_cache`).

The story: render and mask the rows exactly as `train` does; load the target, whole on each process or, with
`shard_target` under `torchrun`, split across the ranks by FSDP2 (`fully_shard`, applied by transformers'
loader through `DistributedConfig(fsdp_size=N)`, so each rank reads and keeps about 1/N of the weights and
the checkpoint's own key conversions, such as DeepSeek-V3's per-expert weights fused into one tensor, are the
library's); plan the shards (by rows and a byte bound only, so the files do not depend on the process count);
skip the shards a previous run finished; deal the rest round-robin to the ranks; forward each shard's rows in
token-budgeted batches and write each shard whole with its marker; mark the cache complete when every shard
is there.

Why FSDP2 and not tensor parallelism: `fully_shard` needs no plan per architecture (it shards every parameter
of a decoder layer on dim 0 and all-gathers the layer just before it runs), so MLA + mixture-of-experts
(DeepSeek-V3, Kimi-K2.5), Qwen, Llama and Gemma shard alike, and the layer's forward is the model's own code,
so the states are the same numbers a single process computes. Tensor parallelism would move less data per
token but needs a sharding plan per module type (transformers has none for every MoE layout) and changes
reduction orders. Capture is a forward-only pass over large batches, where FSDP's per-layer all-gather is
amortised over many tokens.

FSDP runs collectives inside every forward, so every rank must run the same number of forwards: a rank with
fewer batches than the busiest one runs one-token dummy forwards until all are done.
"""

from __future__ import annotations

import json
import logging
import resource
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import torch
import torch.distributed as dist
from torch import Tensor

from inference.decoding.hidden_states import AuxLayers, default_aux_layers
from training.atomic_files import hold_folder
from training.data import TokenizedRow, load_conversations, run_rendering, tokenize_rows
from training.distributed import join_ranks, release_large_frees
from training.errors import TrainingError
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
from training.offline_target import data_hash, output_head

logger = logging.getLogger(__name__)
Progress = Callable[[int, int], None]  # (rows done, rows in all) on rank 0


class CaptureError(TrainingError, ValueError):
    """Capture arguments that cannot be used (no rows, a bad layer choice, a device that is not there)."""


@dataclass
class CaptureConfig:
    """One capture run: the rows (as `train` renders them), the target, the cache folder and how to write it."""

    data: Path
    target: Path
    out: Path
    messages_field: str = "conversations"
    max_length: int = 2048
    aux_layer_ids: tuple[int, int, int] | None = None  # input-of-layer ids; default [2, L//2, L-3]
    shard_bytes: int = 1 << 30
    batch_tokens: int = 8192
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    shard_target: bool = False


class RankMemory(TypedDict):
    """One rank's memory at the end of a capture (`_memory`)."""

    rank: int
    target_bytes_held: int  # its parameter shards and buffers
    peak_rss_bytes: int
    rss_anon_bytes: NotRequired[int]  # private resident memory, where /proc tells it
    peak_cuda_bytes: NotRequired[int]


@dataclass
class CaptureResult:
    """What a capture call did: rows and shards in the cache, how many it wrote now, and each rank's memory."""

    folder: Path
    rows: int
    tokens: int
    shards: int
    written: int
    skipped: int
    bytes: int
    wall_s: float
    ranks: list[RankMemory] = field(default_factory=list)


def run_capture(cfg: CaptureConfig, on_progress: Progress | None = None) -> CaptureResult:
    """Capture cfg.data through cfg.target into cfg.out (resuming a cache left unfinished); return the summary.
    Rank 0 holds the cache folder's lock for the whole capture: a second capture into it is refused at once."""
    started = time.perf_counter()
    rank, world, device = setup_distributed(cfg.device)
    with hold_folder(cfg.out) if rank == 0 else nullcontext():  # one writer per cache folder (rank 0 holds it)
        return _capture(cfg, on_progress, started, rank, world, device)


def _capture(cfg: CaptureConfig, on_progress: Progress | None, started: float, rank: int, world: int,
             device: torch.device) -> CaptureResult:
    from transformers import AutoConfig, AutoTokenizer

    from training.tokenized import tokenizer_hash

    if device.type == "cpu":
        release_large_frees()
    if not cfg.target.is_dir():
        raise CaptureError(f"target folder {cfg.target} does not exist")
    tokenizer = AutoTokenizer.from_pretrained(str(cfg.target))
    rows = tokenize(cfg.data, cfg.messages_field, cfg.max_length, tokenizer)
    num_layers = int(AutoConfig.from_pretrained(str(cfg.target)).num_hidden_layers)  # checked before the slow load
    layers = AuxLayers(cfg.aux_layer_ids, "input") if cfg.aux_layer_ids else default_aux_layers(num_layers)
    try:
        layers.validate(num_layers)
    except ValueError as exc:
        raise CaptureError(str(exc)) from None
    target = load_capture_target(cfg.target, device, cfg.dtype, shard=cfg.shard_target and world > 1, world=world)
    result = capture_into(cfg.out, target, rows, layers, target_identity(cfg.target), tokenizer_hash(tokenizer),
                          dtype=cfg.dtype, shard_bytes=cfg.shard_bytes, batch_tokens=cfg.batch_tokens, rank=rank,
                          world=world, on_progress=on_progress, started=started)
    if world > 1:
        dist.destroy_process_group()
    return result


def setup_distributed(choice: str) -> tuple[int, int, torch.device]:
    """(rank, world, device): one process, or one rank of a `torchrun` job (`training.distributed`)."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise CaptureError("device cuda: no CUDA device is available here (use --device cpu or auto)")
    return join_ranks(choice == "cuda" or (choice == "auto" and torch.cuda.is_available()))


def tokenize(data: Path, messages_field: str, max_length: int, tokenizer: Any) -> list[TokenizedRow]:
    """The rows `train` trains on: rendered with the chat template, assistant tokens masked, unsupervised dropped."""
    conversations = load_conversations(data, messages_field)
    rendering = run_rendering(conversations)  # as the rows' regeneration recorded it (train's default)
    rows = [r for r in tokenize_rows(tokenizer, conversations, max_length, rendering) if sum(r.loss_mask) > 0]
    if not rows:
        raise CaptureError(f"{data}: no row has a supervised token within {max_length} tokens")
    return rows


def load_capture_target(path: Path, device: torch.device, dtype: str, *, shard: bool, world: int) -> Any:
    """The frozen target: whole on `device`, or (shard) FSDP2-sharded over the `world` ranks as it loads."""
    from transformers import AutoModelForCausalLM

    torch_dtype = DTYPES[dtype] if device.type == "cuda" else torch.float32
    if shard:
        from transformers.distributed.configuration_utils import DistributedConfig

        kwargs: dict[str, Any] = {"distributed_config": DistributedConfig(fsdp_size=world)}
        if device.type == "cuda":
            kwargs["device_map"] = device
        target: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype, **kwargs)
    else:
        loaded: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
        target = loaded.to(device)
    target.eval().requires_grad_(False)
    return target


def _full(t: Tensor) -> Tensor:
    """A parameter whole: an FSDP shard is all-gathered (a collective: every rank calls it, in the same order)."""
    full = getattr(t, "full_tensor", None)
    whole: Tensor = full() if full is not None else t
    return whole


def head_tensors(target: Any) -> tuple[Tensor, Tensor, Tensor | None]:
    """The target's scaled input embeddings (fp32), output head and final norm weight, whole."""
    embed = target.get_input_embeddings()
    scale = getattr(embed, "embed_scale", None)
    weight = _full(embed.weight.detach()).float()
    weight = weight * float(scale) if scale is not None else weight
    head, _ = output_head(target)
    norm = getattr(getattr(getattr(target, "model", None), "norm", None), "weight", None)
    return weight, _full(head), _full(norm.detach()) if norm is not None else None


def capture_into(folder: Path, target: Any, rows: list[TokenizedRow], layers: AuxLayers, identity: str,
                 tokenizer_fingerprint: str, *, dtype: str, shard_bytes: int = 1 << 30, batch_tokens: int = 8192,
                 rank: int = 0, world: int = 1, on_progress: Progress | None = None,
                 started: float | None = None) -> CaptureResult:
    """Write (or finish) the cache of `rows` under `folder`; every rank of the job calls it."""
    started = time.perf_counter() if started is None else started
    device = next(iter(target.parameters())).device
    hidden = int(target.config.hidden_size)
    plan = plan_shards([len(r.input_ids) for r in rows], bytes_per_token(hidden, dtype), shard_bytes)
    manifest = cache_manifest(target, rows, plan, layers, identity, tokenizer_fingerprint, dtype)
    open_cache_folder(folder, target, manifest, rank, world, device)
    # --- the shards still missing, dealt round-robin to the ranks, each rank's in token-budgeted batches
    pending = [i for i in range(len(plan)) if not shard_done(folder, i)]
    work = [(i, batch) for i in pending[rank::world] for batch in _batches(plan[i], rows, batch_tokens)]
    done = sum(plan[i][1] for i in range(len(plan)) if i not in pending)
    if on_progress is not None and rank == 0:
        on_progress(done, len(rows))
    capture_work(folder, target, rows, plan, work, layers, dtype=dtype, rank=rank, world=world, done=done,
                 on_progress=on_progress)
    # --- every rank's memory, the cache marked complete, one line of the run's log
    ranks = _gather(_memory(target, device, rank), world)
    _barrier(world, device)
    complete = finish_cache(folder) if rank == 0 else manifest
    written = len(pending)
    total_bytes = sum((folder / f"{shard_name(i)}.safetensors").stat().st_size for i in range(len(plan)))
    result = CaptureResult(folder=folder, rows=len(rows), tokens=int(complete["tokens"]), shards=len(plan),
                           written=written, skipped=len(plan) - written, bytes=total_bytes,
                           wall_s=time.perf_counter() - started, ranks=ranks)
    if rank == 0:
        with (folder / "capture_runs.jsonl").open("a") as log:  # one line per call: who wrote what, peak memory
            log.write(json.dumps({"world": world, "written": written, "skipped": result.skipped,
                                  "wall_s": round(result.wall_s, 2), "ranks": ranks}) + "\n")
    return result


def cache_manifest(target: Any, rows: list[TokenizedRow], plan: list[tuple[int, int]], layers: AuxLayers,
                   identity: str, tokenizer_fingerprint: str, dtype: str) -> CacheManifest:
    """The manifest of the cache of `rows` through `target`, with its shard plan."""
    return {
        "format": FORMAT, "target_identity": identity, "tokenizer_hash": tokenizer_fingerprint,
        "data_hash": data_hash([(r.input_ids, r.loss_mask) for r in rows]),
        "aux_layers_input": list(layers.as_input().ids), "dtype": dtype,
        "hidden_size": int(target.config.hidden_size),
        "model_type": str(getattr(target.config, "model_type", "")),
        "num_hidden_layers": int(target.config.num_hidden_layers),
        "softcap": getattr(target.config, "final_logit_softcapping", None),
        "rows": len(rows), "tokens": sum(len(r.input_ids) for r in rows),
        "shards": [{"row_ids": [r.id for r in rows[a:a + n]], "first": a, "count": n} for a, n in plan],
    }


def open_cache_folder(folder: Path, target: Any, manifest: CacheManifest, rank: int, world: int,
                      device: torch.device) -> None:
    """Start (or check, to resume) the cache and write the target's head once; every rank waits for rank 0."""
    heads = head_tensors(target)  # every rank joins the all-gathers; rank 0 writes
    if rank == 0:
        start_cache(folder, manifest)
        if not (folder / HEAD_FILE).is_file():
            write_head(folder, *heads)
    del heads
    _barrier(world, device)


def capture_work(folder: Path, target: Any, rows: list[TokenizedRow], plan: list[tuple[int, int]],
                 work: list[tuple[int, list[int]]], layers: AuxLayers, *, dtype: str, rank: int, world: int,
                 done: int, on_progress: Progress | None) -> None:
    """Forward this rank's batches (`work`: (shard, row indices)) and write each shard whole after its last batch;
    every rank runs as many forwards as the busiest one. `done`: the rows already cached, for the progress."""
    device = next(iter(target.parameters())).device
    steps = _all_max(len(work), world, device)
    aux: list[Tensor] = []
    final: list[Tensor] = []
    for step in range(steps):
        finished = 0
        if step < len(work):
            index, batch = work[step]
            states, lengths = _forward(target, [rows[j] for j in batch], layers, device)
            aux += [states.aux[b, :n].to(DTYPES[dtype]).cpu() for b, n in enumerate(lengths)]
            final += [states.final[b, :n].to(DTYPES[dtype]).cpu() for b, n in enumerate(lengths)]
            first, count = plan[index]
            if batch[-1] == first + count - 1:  # the shard's last batch: write it whole
                shard_rows = rows[first:first + count]
                write_shard(folder, index, [r.id for r in shard_rows], [(r.input_ids, r.loss_mask) for r in shard_rows],
                            aux, final, dtype)
                aux, final, finished = [], [], count
        else:  # FSDP all-gathers inside every forward: a rank out of work still joins the busiest one's steps
            _dummy_forward(target, device)
        done += _all_sum(finished, world, device)
        if on_progress is not None and rank == 0:
            on_progress(done, len(rows))


def _batches(shard: tuple[int, int], rows: list[TokenizedRow], budget: int) -> list[list[int]]:
    """A shard's rows in order, packed while rows x widest row stays within the token budget."""
    first, count = shard
    batches: list[list[int]] = []
    width = 0
    for j in range(first, first + count):
        n = len(rows[j].input_ids)
        if batches and (len(batches[-1]) + 1) * max(width, n) <= budget:
            batches[-1].append(j)
            width = max(width, n)
        else:
            batches.append([j])
            width = n
    return batches


@dataclass
class _States:
    aux: Tensor
    final: Tensor


@torch.no_grad()
def _forward(target: Any, rows: list[TokenizedRow], layers: AuxLayers, device: torch.device
             ) -> tuple[_States, list[int]]:
    """The target's aux and final states for right-padded rows (the states past each row's end are dropped)."""
    lengths = [len(r.input_ids) for r in rows]
    ids = torch.zeros(len(rows), max(lengths), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :lengths[i]] = torch.tensor(r.input_ids)
        attn[i, :lengths[i]] = 1
    ids, attn = ids.to(device), attn.to(device)
    # logits_to_keep=1: the head runs on the last position only; the cache keeps the final state, not logits
    out = target(input_ids=ids, attention_mask=attn, output_hidden_states=True, logits_to_keep=1)
    hs = out.hidden_states
    aux = torch.cat([hs[i] for i in layers.hidden_state_indices()], dim=-1)
    return _States(aux=aux, final=hs[-1]), lengths


@torch.no_grad()
def _dummy_forward(target: Any, device: torch.device) -> None:
    ids = torch.zeros(1, 1, dtype=torch.long, device=device)
    target(input_ids=ids, attention_mask=torch.ones_like(ids))


def _memory(target: Any, device: torch.device, rank: int) -> RankMemory:
    """This rank's memory: target bytes it holds (its parameter shards and buffers), peak RSS, peak CUDA bytes."""
    held = 0
    for t in [*target.parameters(), *target.buffers()]:
        local = t.to_local() if hasattr(t, "to_local") else t
        held += local.numel() * local.element_size()
    record: RankMemory = {"rank": rank, "target_bytes_held": held,
                          "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    try:  # private (anonymous) resident memory now: RSS also counts the file pages of memory-mapped weights
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
        record["rss_anon_bytes"] = int(status["RssAnon"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        pass
    if device.type == "cuda":
        record["peak_cuda_bytes"] = torch.cuda.max_memory_allocated(device)
    return record


def _barrier(world: int, device: torch.device) -> None:
    if world > 1:
        dist.barrier(device_ids=[device.index]) if device.type == "cuda" else dist.barrier()


def _all_max(value: int, world: int, device: torch.device) -> int:
    if world == 1:
        return value
    t = torch.tensor([value], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _all_sum(value: int, world: int, device: torch.device) -> int:
    if world == 1:
        return value
    t = torch.tensor([value], device=device)
    dist.all_reduce(t)
    return int(t.item())


def _gather(record: RankMemory, world: int) -> list[RankMemory]:
    if world == 1:
        return [record]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, record)
    return out
